"""Trainer speed: one polyrl policy update vs one TRL GRPOTrainer update, side by side.

Both sides get the same tiny model (``polyrl.models.tiny``, saved once to a temp
directory and loaded by each) and the same batch of scored rollouts (prompts,
completions, advantages from one seed). Each side runs in its own fresh child
process, so peak memory is measured the same way for both: the peak resident set
(sampled every 1 ms) during the first update minus the resident set just before
it (on CUDA: ``torch.cuda.max_memory_allocated`` over the update). Tokens/s counts
prompt + completion tokens of every sequence, identically for both; the time is
the fastest of ``--repeats`` round-robin rounds.

The TRL update is its real loss path on an already-scored batch:
``GRPOTrainer.compute_loss`` (its fused log-prob forward and loss) + backward +
gradient clipping + its optimizer step, the part of ``training_step`` after
generation. The polyrl update is ``polyrl.train.policy_update``. All methods are
timed round-robin in one process (fair under a shared, noisy CPU).
``loss_max_abs_diff_vs_trl`` / ``grad_max_abs_diff_vs_trl`` compare both losses on
identical off-policy tensors (old log-probs perturbed so the clip is active).

Also measured: the shared-prefix training forward+backward vs the dense one at
G=8 completions of 512-token prompts.

Usage: ``python benchmarks/trainer_speed.py [--json] [--device cpu|cuda]``.
With ``--json`` the last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

MODEL = {"hidden_size": 128, "num_layers": 4, "num_heads": 4, "intermediate_size": 384}


def make_batch(n_prompts: int, group: int, prompt_len: int, max_completion: int, seed: int):
    """Equal-length prompts (TRL derives positions from the column), ragged completions."""
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(3, 259, (prompt_len,), generator=g).tolist()
               for _ in range(n_prompts)]
    groups = []
    for _ in range(n_prompts):
        lens = torch.randint(max_completion // 2, max_completion + 1, (group,), generator=g)
        groups.append([torch.randint(3, 259, (int(n),), generator=g).tolist() for n in lens])
    rewards = torch.rand(n_prompts, group, generator=g).round()
    return prompts, groups, rewards


class PeakRSS:
    """Samples this process's resident set every 1 ms; ``peak_mib`` over the block."""

    def __init__(self, device: str) -> None:
        import psutil

        self.proc = psutil.Process()
        self.device = device
        self.peak = 0
        self.base = 0
        self._stop = threading.Event()

    def __enter__(self) -> PeakRSS:
        if self.device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()
            return self
        self.base = self.peak = self.proc.memory_info().rss
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.proc.memory_info().rss)
            time.sleep(0.001)

    def __exit__(self, *exc: object) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()
            self.peak = torch.cuda.max_memory_allocated()
            return
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.proc.memory_info().rss)

    @property
    def peak_mib(self) -> float:
        return (self.peak - self.base) / 2**20


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def build_polyrl(args, model_dir: Path, shared: bool):
    """One polyrl update (``policy_update``) on the benchmark batch, as a callable."""
    from transformers import AutoModelForCausalLM

    from polyrl.train import Group, UpdateOptions, group_advantages, policy_update
    from polyrl.types import Task

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(args.device)
    prompts, groups, rewards = make_batch(args.prompts, args.group, args.prompt_len,
                                          args.completion_len, args.seed)
    adv = group_advantages(rewards, "group")
    batch = [Group(task=Task(id=str(i), domain="bench/x-v1", split="train", difficulty=1,
                             prompt=[], reference=""), arm=0, prompt_ids=p, completions=g,
                   behaviour_logprobs=[[] for _ in g], rewards=rewards[i].tolist(),
                   advantages=adv[i].tolist(), policy_version=0)
             for i, (p, g) in enumerate(zip(prompts, groups, strict=True))]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6)
    opts = UpdateOptions(loss_agg="token-mean", clip_eps_low=0.2, clip_eps_high=0.28,
                         micro_batch_size=args.prompts * args.group, max_grad_norm=1.0,
                         shared_prefix=shared)
    return lambda: policy_update(model, opt, batch, opts).loss


def trl_inputs(args, device, old_noise: float = 0.0):
    """The benchmark batch as TRL's ``_compute_loss`` inputs."""
    from polyrl.train import group_advantages

    n = args.prompts * args.group
    prompts, groups, rewards = make_batch(args.prompts, args.group, args.prompt_len,
                                          args.completion_len, args.seed)
    flat = [c for g in groups for c in g]
    c_ids = torch.zeros(n, args.completion_len, dtype=torch.long)
    c_mask = torch.zeros_like(c_ids)
    for i, c in enumerate(flat):
        c_ids[i, : len(c)] = torch.tensor(c)
        c_mask[i, : len(c)] = 1
    p_ids = torch.tensor([p for p in prompts for _ in range(args.group)])
    return {"prompt_ids": p_ids.to(device), "prompt_mask": torch.ones_like(p_ids).to(device),
            "completion_ids": c_ids.to(device), "completion_mask": c_mask.to(device),
            "advantages": group_advantages(rewards, "group").reshape(-1).to(device),
            "num_items_in_batch": c_mask.sum().to(device)}, prompts, groups


def build_trl(args, model_dir: Path, out_dir: Path):
    """One TRL GRPOTrainer update on the same batch: compute_loss, backward, clip, step."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from polyrl.models.tiny import build_byte_tokenizer

    n = args.prompts * args.group
    cfg = GRPOConfig(output_dir=str(out_dir), per_device_train_batch_size=n,
                     num_generations=args.group, max_completion_length=args.completion_len,
                     report_to=[], use_cpu=args.device == "cpu", bf16=False, beta=0.0,
                     loss_type="dapo", epsilon=0.2, epsilon_high=0.28, learning_rate=1e-6,
                     max_grad_norm=1.0, save_strategy="no")
    trainer = GRPOTrainer(model=str(model_dir), args=cfg, processing_class=build_byte_tokenizer(),
                          reward_funcs=lambda completions, **kw: [0.0] * len(completions),
                          train_dataset=Dataset.from_dict({"prompt": ["a"] * n}))
    trainer.current_gradient_accumulation_steps = 1
    trainer.create_optimizer()
    model, opt = trainer.model, trainer.optimizer
    inputs, _, _ = trl_inputs(args, model.device)

    def step() -> float:
        model.train()
        loss = trainer.compute_loss(model, inputs)
        trainer.accelerator.backward(loss)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return float(loss.detach())

    return step, trainer


def build_prefix(args, model_dir: Path, shared: bool):
    """Training forward+backward at G=8 completions of 512-token prompts (2 groups)."""
    from transformers import AutoModelForCausalLM

    from polyrl.train import dense_logprobs, shared_prefix_logprobs

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(args.device)
    prompts, groups, _ = make_batch(2, 8, 512, 64, args.seed)
    flat_p = [p for p, g in zip(prompts, groups, strict=True) for _ in g]
    flat_c = [c for g in groups for c in g]

    def step() -> float:
        model.zero_grad(set_to_none=True)
        if shared:
            out = shared_prefix_logprobs(model, prompts, groups)
        else:
            out = dense_logprobs(model, flat_p, flat_c)
        out.logprobs.sum().backward()
        return float(out.logprobs.detach().sum())

    return step


def build(name: str, args, model_dir: Path, out_dir: Path):
    if name == "trl":
        return build_trl(args, model_dir, out_dir)[0]
    if name in ("polyrl", "polyrl-dense"):
        return build_polyrl(args, model_dir, shared=name == "polyrl")
    return build_prefix(args, model_dir, shared=name == "prefix-shared")


NAMES = ("polyrl", "polyrl-dense", "trl", "prefix-dense", "prefix-shared")


def part_memory(name: str, args, model_dir: Path, out_dir: Path) -> dict:
    """Peak memory of the first (cold) update in this fresh process."""
    step = build(name, args, model_dir, out_dir)
    with PeakRSS(args.device) as mem:
        loss = step()
    return {"loss": loss, "peak_mib": mem.peak_mib}


def part_time(args, model_dir: Path, out_dir: Path) -> dict:
    """Seconds per update of every method: the fastest of ``repeats`` round-robin rounds.

    Round-robin so that background load hits every method alike; the minimum is
    the least-disturbed run (as ``timeit`` reports).
    """
    steps = {n: build(n, args, model_dir, out_dir / n) for n in NAMES}
    for step in steps.values():
        step()  # warm-up
    times: dict[str, list[float]] = {n: [] for n in NAMES}
    for _ in range(args.repeats):
        for n, step in steps.items():
            _sync(args.device)
            t0 = time.perf_counter()
            step()
            _sync(args.device)
            times[n].append(time.perf_counter() - t0)
    return {n: min(v) for n, v in times.items()}


def part_check(args, model_dir: Path, out_dir: Path) -> dict:
    """Loss and gradients of polyrl vs TRL on identical off-policy tensors (clip active)."""
    from transformers import AutoModelForCausalLM

    from polyrl.train import dense_logprobs, grpo_loss

    _, trainer = build_trl(args, model_dir, out_dir)
    ours = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(args.device)
    inputs, prompts, groups = trl_inputs(args, ours.device)
    flat_p = [p for p in prompts for _ in range(args.group)]
    flat_c = [c for g in groups for c in g]
    with torch.no_grad():
        base = dense_logprobs(ours, flat_p, flat_c).logprobs
    gen = torch.Generator().manual_seed(1)
    old = base + 0.3 * torch.randn(base.shape, generator=gen).to(base.device)
    inputs["old_per_token_logps"] = old
    trainer.model.train()
    theirs = trainer._compute_loss(trainer.model, inputs)
    theirs.backward()
    lp = dense_logprobs(ours, flat_p, flat_c)
    out = grpo_loss(lp.logprobs, old, inputs["advantages"], lp.mask, clip_eps_low=0.2,
                    clip_eps_high=0.28, loss_agg="token-mean")
    out.loss.backward()
    trl_params = dict(trainer.model.named_parameters())
    grad_diff = max((p.grad - trl_params[n].grad).abs().max().item()
                    for n, p in ours.named_parameters())
    return {"loss_diff": abs(out.loss.item() - theirs.item()), "grad_diff": grad_diff,
            "clip_fraction": float(out.clip_fraction)}


def run_child(part: str, args, model_dir: Path, out_dir: Path) -> dict:
    cmd = [sys.executable, __file__, "--part", part, "--model-dir", str(model_dir),
           "--out-dir", str(out_dir), "--device", args.device, "--prompts", str(args.prompts),
           "--group", str(args.group), "--prompt-len", str(args.prompt_len),
           "--completion-len", str(args.completion_len), "--repeats", str(args.repeats),
           "--seed", str(args.seed)]
    env = {**os.environ, "TRANSFORMERS_VERBOSITY": "error", "TQDM_DISABLE": "1"}
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"benchmark part {part} failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="last stdout line is one JSON object")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--prompts", type=int, default=4, help="prompts (groups) in the batch")
    ap.add_argument("--group", type=int, default=8, help="completions per prompt (G)")
    ap.add_argument("--prompt-len", type=int, default=128, help="prompt tokens")
    ap.add_argument("--completion-len", type=int, default=64, help="max completion tokens")
    ap.add_argument("--repeats", type=int, default=3, help="timed rounds (fastest counts)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--part", default="", help=argparse.SUPPRESS)
    ap.add_argument("--model-dir", default="", help=argparse.SUPPRESS)
    ap.add_argument("--out-dir", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.part:
        torch.manual_seed(args.seed)
        model_dir, out_dir = Path(args.model_dir), Path(args.out_dir)
        if args.part == "time":
            out = part_time(args, model_dir, out_dir)
        elif args.part == "check":
            out = part_check(args, model_dir, out_dir)
        else:
            out = part_memory(args.part.removeprefix("mem:"), args, model_dir, out_dir)
        print(json.dumps(out))
        return

    from polyrl.models.tiny import save_tiny

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = save_tiny(Path(tmp) / "model", seed=args.seed, **MODEL)
        mem = {n: run_child(f"mem:{n}", args, model_dir, Path(tmp) / n) for n in NAMES}
        secs = run_child("time", args, model_dir, Path(tmp) / "time")
        check = run_child("check", args, model_dir, Path(tmp) / "check")
    n_tok = args.prompts * args.group * args.prompt_len  # + completion tokens below
    prompts, groups, _ = make_batch(args.prompts, args.group, args.prompt_len,
                                    args.completion_len, args.seed)
    n_tok += sum(len(c) for g in groups for c in g)
    tps = {n: n_tok / secs[n] for n in ("polyrl", "polyrl-dense", "trl")}
    result = {
        "device": args.device,
        "batch": f"{args.prompts} prompts x G={args.group}, prompt {args.prompt_len} tokens, "
                 f"completions <= {args.completion_len} tokens ({n_tok} tokens)",
        "polyrl_tokens_per_s": round(tps["polyrl"], 1),
        "polyrl_dense_tokens_per_s": round(tps["polyrl-dense"], 1),
        "trl_tokens_per_s": round(tps["trl"], 1),
        "vs_trl_tokens_per_s": round(tps["polyrl"] / tps["trl"], 3),
        "dense_vs_trl_tokens_per_s": round(tps["polyrl-dense"] / tps["trl"], 3),
        "peak_mib": round(mem["polyrl"]["peak_mib"], 1),
        "dense_peak_mib": round(mem["polyrl-dense"]["peak_mib"], 1),
        "trl_peak_mib": round(mem["trl"]["peak_mib"], 1),
        "update_loss_abs_diff_vs_trl": abs(mem["polyrl"]["loss"] - mem["trl"]["loss"]),
        "loss_max_abs_diff_vs_trl": check["loss_diff"],
        "grad_max_abs_diff_vs_trl": check["grad_diff"],
        "check_clip_fraction": round(check["clip_fraction"], 4),
        "shared_prefix_vs_dense": round(secs["prefix-dense"] / secs["prefix-shared"], 3),
        "shared_prefix_s": round(secs["prefix-shared"], 4),
        "dense_prefix_s": round(secs["prefix-dense"], 4),
        "shared_prefix_peak_mib": round(mem["prefix-shared"]["peak_mib"], 1),
        "dense_prefix_peak_mib": round(mem["prefix-dense"]["peak_mib"], 1),
    }
    if not args.json:
        for k, v in result.items():
            print(f"{k:32s} {v}")
    else:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
