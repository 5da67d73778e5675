"""Time ``ReplayBuffer.sample`` against the dict round-trip copy it used to make.

A buffer of ``--capacity`` realistic groups (G=``--group-size`` completions of 200-400
token ids from a 32,000 vocabulary, their float log-probs and loss masks, a ~200-token
prompt: what ``build_groups`` makes from a policy's tensors via ``tolist()``) is filled,
then ``sample(--n)`` is timed ``--repeats`` times, side by side in one process with
the old per-group copy (``Group.from_dict({**g.to_dict(), "replayed": True})``) of the
same number of groups. Also reports the buffer's byte count (``ReplayBuffer.nbytes``)
against the heap growth tracemalloc measures while filling it.

Usage: python benchmarks/replay_sample.py [--capacity 256] [--n 4] [--repeats 200] [--json]
With ``--json`` the last stdout line is ``{"old_ms", "new_ms", "speedup", "nbytes_mib",
"traced_mib", "groups"}`` (times: median ms per ``sample`` call).
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
import tracemalloc

import numpy as np
import torch

from polyrl.train.groups import Group
from polyrl.train.replay import ReplayBuffer
from polyrl.types import Task


def realistic_group(i: int, group_size: int, gen: torch.Generator) -> Group:
    """One group as ``build_groups`` makes it: lists from tensors' ``tolist()``."""
    task = Task(id=f"train-{i}", domain="math/gsm8k-v1", split="train", difficulty=2,
                prompt=[{"role": "user", "content": "Solve step by step. " * 40}],
                reference="42", metadata={"answer": "42"})
    prompt = torch.randint(0, 32_000, (200,), generator=gen).tolist()
    lengths = torch.randint(200, 401, (group_size,), generator=gen).tolist()
    rows = [torch.randint(0, 32_000, (n,), generator=gen).tolist() for n in lengths]
    lps = [(-torch.rand(n, generator=gen) * 3).tolist() for n in lengths]
    rewards = [float(k % 2) for k in range(group_size)]
    mean = float(np.mean(rewards))
    return Group(task=task, arm=0, prompt_ids=prompt, completions=rows, behaviour_logprobs=lps,
                 rewards=rewards, advantages=[r - mean for r in rewards], policy_version=0,
                 finish_reasons=["stop"] * group_size, loss_masks=[[1] * n for n in lengths])


def old_copy(buf: ReplayBuffer, n: int, rng: np.random.Generator) -> list[Group]:
    """The former ``sample``'s body: draw, then copy every drawn group via its dict."""
    p = np.array([g.priority for g in buf.groups])
    idx = rng.choice(len(buf.groups), size=n, replace=False, p=p / p.sum())
    return [Group.from_dict({**buf.groups[i].to_dict(), "replayed": True}) for i in idx]


def median_ms(fn, repeats: int) -> float:
    """Median wall time of ``fn()`` in milliseconds over ``repeats`` calls."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capacity", type=int, default=256, help="groups (replay.capacity)")
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--n", type=int, default=4, help="groups drawn per sample call")
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--json", action="store_true", help="one JSON object on the last line")
    args = parser.parse_args()

    gen = torch.Generator().manual_seed(0)
    buf = ReplayBuffer(capacity=args.capacity, max_staleness=10**9)
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    for i in range(args.capacity):
        buf.add(realistic_group(i, args.group_size, gen))
    gc.collect()
    traced_mib = (tracemalloc.get_traced_memory()[0] - base) / 2**20
    tracemalloc.stop()
    rng_old, rng_new = np.random.default_rng(1), np.random.default_rng(1)
    old_ms, new_ms = [], []
    for _ in range(5):  # interleaved rounds: both see the same machine load
        old_ms.append(median_ms(lambda: old_copy(buf, args.n, rng_old), args.repeats // 5))
        new_ms.append(median_ms(lambda: buf.sample(args.n, 0, rng_new), args.repeats // 5))
    old, new = statistics.median(old_ms), statistics.median(new_ms)
    nbytes_mib = getattr(buf, "nbytes", float("nan")) / 2**20
    out = {"old_ms": round(old, 3), "new_ms": round(new, 3), "speedup": round(old / new, 1),
           "nbytes_mib": round(nbytes_mib, 1), "traced_mib": round(traced_mib, 1),
           "groups": len(buf)}
    print(f"sample({args.n}) of {len(buf)} groups (G={args.group_size}): old copy {old:.3f} ms, "
          f"now {new:.3f} ms (x{old / new:.1f}); buffer holds {nbytes_mib:.1f} MiB by its "
          f"count, {traced_mib:.1f} MiB traced")
    if args.json:
        print(json.dumps(out))


if __name__ == "__main__":
    main()
