"""Policy update with repeated completions merged vs run one by one, side by side.

A step of the quickstart shape: 16 groups of G=8 completions (<= 16 tokens) of
~15-token prompts on the quickstart's tiny Llama (hidden 128, 4 layers), KL to a
reference model, token-mean loss. In each group only ``--distinct-share`` of the
rows differ; the rest repeat one of them (the quickstart measured ~0.6 from its
scoring jobs: 44% of code/gen-v1 completions and 33% of tools/gen-v1 completions
distinct within their group). Both settings update copies of one model on the same
groups, timed round-robin (fastest of ``--repeats`` rounds); the gradients are
compared too.

Usage: ``python benchmarks/merge_repeats.py [--distinct-share 0.6] [--json]``;
with ``--json`` the last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import time

import torch

from polyrl.models.tiny import build_tiny_model
from polyrl.train.groups import Group
from polyrl.train.update import UpdateOptions, chunk_logprobs, policy_update
from polyrl.types import Task

TASK = Task(id="t", domain="bench/x-v1", split="train", difficulty=1, prompt=[], reference="")


def make_groups(n_groups: int, group_size: int, share: float, seed: int) -> list[Group]:
    """Groups whose rows repeat: ``round(share * G)`` distinct completions each."""
    rng = random.Random(seed)
    groups = []
    for _ in range(n_groups):
        prompt = [rng.randint(3, 258) for _ in range(rng.randint(8, 24))]
        k = max(1, round(share * group_size))
        distinct = [[rng.randint(3, 258) for _ in range(rng.randint(2, 16))] for _ in range(k)]
        rewards_of = [rng.random() for _ in range(k)]
        pick = list(range(k)) + [rng.randrange(k) for _ in range(group_size - k)]
        rng.shuffle(pick)
        rewards = [rewards_of[j] for j in pick]
        mean = sum(rewards) / len(rewards)
        groups.append(Group(task=TASK, arm=0, prompt_ids=prompt,
                            completions=[list(distinct[j]) for j in pick],
                            behaviour_logprobs=[[] for _ in pick], rewards=rewards,
                            advantages=[r - mean for r in rewards], policy_version=0))
    return groups


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--distinct-share", type=float, default=0.6)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    groups = make_groups(16, 8, args.distinct_share, seed=0)
    base = build_tiny_model(hidden_size=128, num_layers=4, num_heads=4, intermediate_size=384,
                            max_position_embeddings=256, seed=0)
    ref = copy.deepcopy(base).eval()
    models = {m: copy.deepcopy(base) for m in (False, True)}
    opts = {m: UpdateOptions(merge_repeats=m, kl_coef=0.02, loss_agg="token-mean",
                             micro_batch_size=16, max_tokens=16) for m in (False, True)}

    def ref_fn(chunk, o):
        with torch.no_grad():
            return chunk_logprobs(ref, chunk, o, False).logprobs

    best = {False: float("inf"), True: float("inf")}
    grads = {}
    for r in range(args.repeats + 1):
        for m in (False, True):
            model = models[m]
            model.zero_grad(set_to_none=True)
            opt = torch.optim.SGD(model.parameters(), lr=0.0)
            t0 = time.perf_counter()
            stats = policy_update(model, opt, groups, opts[m], lambda c, o=opts[m]: ref_fn(c, o),
                                  step_optimizer=False)
            dt = time.perf_counter() - t0
            if r > 0:  # round 0 warms up
                best[m] = min(best[m], dt)
            grads[m] = torch.cat([p.grad.flatten() for p in model.parameters()
                                  if p.grad is not None])
            if m:
                distinct = stats.distinct_sequences
    out = {
        "distinct_share": distinct / (16 * 8),
        "update_s_unmerged": best[False],
        "update_s_merged": best[True],
        "speedup": best[False] / best[True],
        "grad_max_abs_diff": float((grads[False] - grads[True]).abs().max()),
    }
    if not args.json:
        print(f"distinct rows {out['distinct_share']:.2f}: update {best[False] * 1e3:.1f} ms "
              f"unmerged vs {best[True] * 1e3:.1f} ms merged = {out['speedup']:.2f}x; "
              f"gradients differ by at most {out['grad_max_abs_diff']:.2e}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
