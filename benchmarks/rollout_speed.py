"""Rollout speed: plain per-sample ``generate`` vs polyrl group generation, and speculative decoding.

All figures are measured side by side in one run on tiny byte-level Llama models
built from configs and trained briefly on the same synthetic corpus (the draft
is a smaller model trained on the same data):

- ``group_vs_plain``: tokens/s of ``HFPolicy.generate_from_tokens(prompt, G)``
  (prompt prefilled once, KV cache shared by the G samples, one batched decode)
  over tokens/s of transformers ``model.generate`` called once per sample
  (G=8, 512-token prompt, 64 new tokens, sampling at temperature 1). Also
  ``group_vs_hf_batched`` (one ``generate`` call with ``num_return_sequences=G``,
  which prefills G copies) and ``group_vs_no_reuse`` (polyrl with the prompt
  repeated G times).
- ``greedy_equal``: polyrl's greedy outputs (prompts of different lengths in one
  left-padded batch, prefix reuse on) equal ``model.generate(do_sample=False)``.
- ``spec_speedup``: single-sequence greedy tokens/s with the draft proposing
  ``k`` tokens per round over the same decoding without a draft;
  ``spec_acceptance``: accepted / proposed draft tokens; ``spec_greedy_equal``.
- ``kvq_*``: the int8 KV cache's memory ratio and speed relative to full precision.

Usage: ``python benchmarks/rollout_speed.py [--json] [--quick]``; with ``--json``
the last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time

import torch

from polyrl.models.tiny import build_byte_tokenizer, build_tiny_model
from polyrl.rollout import HFPolicy, SamplingParams
from polyrl.rollout.kv_cache import Int8Cache

WORDS = {
    "adj": ["quick", "lazy", "red", "small", "bright", "quiet", "old", "new"],
    "noun": ["fox", "dog", "cat", "bird", "tree", "river", "house", "robot"],
    "verb": ["jumps over", "looks at", "runs past", "sits near", "waits for", "follows"],
}


def corpus(n_sentences: int, seed: int) -> str:
    """Synthetic text: ``the <adj> <noun> <verb> the <adj> <noun>.`` sentences."""
    rng = random.Random(seed)
    out = []
    for _ in range(n_sentences):
        w = {k: rng.choice(v) for k, v in WORDS.items()}
        out.append(f"the {w['adj']} {w['noun']} {w['verb']} the {rng.choice(WORDS['adj'])} "
                   f"{rng.choice(WORDS['noun'])}.")
    return " ".join(out)


def log(msg: str) -> None:
    """Progress on stderr (stdout is kept for the figures)."""
    print(f"[rollout_speed] {msg}", file=sys.stderr, flush=True)


def train(model: torch.nn.Module, ids: torch.Tensor, steps: int, seq: int = 64,
          batch: int = 8, lr: float = 3e-3, seed: int = 0) -> float:
    """Next-token training on random windows of ``ids``; returns the final loss.

    ``seq`` must cover the positions used later (prompt + new tokens): RoPE models
    trained on short windows produce garbage past them.
    """
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    loss = torch.tensor(0.0)
    for _ in range(steps):
        starts = torch.randint(0, len(ids) - seq - 1, (batch,), generator=gen)
        x = torch.stack([ids[s : s + seq] for s in starts])  # (batch, seq)
        loss = model(input_ids=x, labels=x).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    return float(loss.detach())


def timed(fn, repeats: int) -> tuple[float, object]:  # noqa: ANN001
    """Best wall seconds of ``repeats`` calls, and the last result."""
    best, out = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="last line: one JSON object")
    ap.add_argument("--group", type=int, default=8, help="samples per prompt (G)")
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--train-steps", type=int, default=150)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch CPU threads (1 = stable timings on a shared machine)")
    ap.add_argument("--draft-tokens", type=int, default=4, help="speculative proposals per round")
    ap.add_argument("--repeats", type=int, default=2, help="timing repeats (best is kept)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--quick", action="store_true", help="small sizes for a smoke run")
    a = ap.parse_args()
    if a.quick:
        a.prompt_tokens, a.new_tokens, a.train_steps, a.repeats = 128, 16, 10, 1
    torch.manual_seed(0)
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    tok = build_byte_tokenizer()
    ids = torch.tensor(tok(corpus(3000, seed=0), add_special_tokens=False)["input_ids"])
    target = build_tiny_model(hidden_size=256, num_layers=6, num_heads=4, intermediate_size=768,
                              seed=0)
    draft = build_tiny_model(hidden_size=64, num_layers=1, num_heads=2, intermediate_size=192,
                             seed=1)
    t0 = time.perf_counter()
    seq = a.prompt_tokens + a.new_tokens
    batch = max(1, 640 // seq)
    # Higher rates diverge at the target's depth; the 1-layer draft takes a higher one.
    loss_t = train(target, ids, a.train_steps, seq=seq, batch=batch, lr=5e-4)
    loss_d = train(draft, ids, a.train_steps, seq=seq, batch=batch, lr=2e-3, seed=1)
    train_s = time.perf_counter() - t0
    log(f"trained target (loss {loss_t:.3f}) and draft (loss {loss_d:.3f}) in {train_s:.1f} s")
    target.to(dev)
    draft.to(dev)
    held_out = tok(corpus(400, seed=99), add_special_tokens=False)["input_ids"]
    prompt = held_out[: a.prompt_tokens]
    G, T = a.group, a.new_tokens
    sample = SamplingParams(temperature=1.0, max_tokens=T, seed=0)
    group = HFPolicy(target, tok)
    no_reuse = HFPolicy(target, tok, prefix_reuse=False)
    for p in (group, no_reuse):
        p.eos_ids = set()  # every row makes exactly T tokens, as with min_new_tokens below
    x = torch.tensor([prompt], device=dev)
    hf_kw = {"do_sample": True, "top_k": 0, "temperature": 1.0, "max_new_tokens": T,
             "min_new_tokens": T, "pad_token_id": 0}

    def plain() -> None:
        for _ in range(G):
            target.generate(x, **hf_kw)

    with torch.inference_mode():
        group.generate_from_tokens([prompt[:32]], 2, sample.replace(max_tokens=4))  # warm-up
        target.generate(x[:, :32], max_new_tokens=4, do_sample=False, pad_token_id=0)
        plain_s, _ = timed(plain, a.repeats)
        batched_s, _ = timed(lambda: target.generate(x, num_return_sequences=G, **hf_kw),
                             a.repeats)
    group_s, outs = timed(lambda: group.generate_from_tokens([prompt], G, sample), a.repeats)
    no_reuse_s, _ = timed(lambda: no_reuse.generate_from_tokens([prompt], G, sample), a.repeats)
    assert all(len(c.token_ids) == T for c in outs)
    log(f"plain {plain_s:.2f} s, hf batched {batched_s:.2f} s, group {group_s:.2f} s, "
        f"no reuse {no_reuse_s:.2f} s")
    tokens = G * T

    # Greedy equality: three prompt lengths in one left-padded batch vs model.generate.
    greedy = SamplingParams(temperature=0, max_tokens=T)
    prompts = [prompt, held_out[1000 : 1000 + a.prompt_tokens // 2], held_out[3000:3100]]
    ours = HFPolicy(target, tok).generate_from_tokens(prompts, 2, greedy)
    greedy_equal = True
    with torch.inference_mode():
        for i, p in enumerate(prompts):
            ref = target.generate(torch.tensor([p], device=dev), max_new_tokens=T,
                                  do_sample=False, pad_token_id=0)[0, len(p):].tolist()
            for c in ours[2 * i : 2 * i + 2]:
                greedy_equal &= c.token_ids == ref[: len(c.token_ids)]

    log(f"greedy_equal={greedy_equal}")
    # Speculative decoding: one sequence, greedy, draft vs no draft.
    single = HFPolicy(target, tok)
    spec = HFPolicy(target, tok, draft_model=draft, num_draft_tokens=a.draft_tokens)
    plain1_s, base_out = timed(lambda: single.generate_from_tokens([prompt], 1, greedy), a.repeats)
    spec_s, spec_out = timed(lambda: spec.generate_from_tokens([prompt], 1, greedy), a.repeats)
    st = spec.stats.extra
    spec_acceptance = st["spec_accepted"] / max(1, st["spec_proposed"])
    spec_t = HFPolicy(target, tok, draft_model=draft, num_draft_tokens=a.draft_tokens)
    spec_t.generate_from_tokens([prompt], 2, sample)
    acc_t1 = spec_t.stats.extra["spec_accepted"] / max(1, spec_t.stats.extra["spec_proposed"])
    n_spec = len(spec_out[0].token_ids)
    log(f"speculative {spec_s:.2f} s vs {plain1_s:.2f} s, acceptance {spec_acceptance:.3f}")

    # Int8 KV cache: group generation speed and cache memory.
    kvq = HFPolicy(target, tok, kv_cache="quantized")
    kvq.eos_ids = set()
    kvq_s, _ = timed(lambda: kvq.generate_from_tokens([prompt], G, sample), a.repeats)
    cache = Int8Cache(target.config)
    with torch.inference_mode():
        target(input_ids=x, cache=cache, use_cache=True)
    full_bytes = 2 * target.config.num_hidden_layers * len(prompt) * target.config.hidden_size * \
        next(target.parameters()).element_size()

    fig = {
        "device": str(dev), "threads": torch.get_num_threads(),
        "group": G, "prompt_tokens": len(prompt), "new_tokens": T,
        "train_s": round(train_s, 2), "target_loss": round(loss_t, 3), "draft_loss": round(loss_d, 3),
        "plain_tok_s": round(tokens / plain_s, 1),
        "hf_batched_tok_s": round(tokens / batched_s, 1),
        "group_tok_s": round(tokens / group_s, 1),
        "no_reuse_tok_s": round(tokens / no_reuse_s, 1),
        "group_vs_plain": round(plain_s / group_s, 3),
        "group_vs_hf_batched": round(batched_s / group_s, 3),
        "group_vs_no_reuse": round(no_reuse_s / group_s, 3),
        "greedy_equal": bool(greedy_equal),
        "single_tok_s": round(len(base_out[0].token_ids) / plain1_s, 1),
        "spec_tok_s": round(n_spec / spec_s, 1),
        "spec_speedup": round((n_spec / spec_s) / (len(base_out[0].token_ids) / plain1_s), 3),
        "spec_acceptance": round(spec_acceptance, 3),
        "spec_acceptance_t1": round(acc_t1, 3),
        "spec_tokens_per_round": round(n_spec / max(1, st["spec_rounds"] / a.repeats), 2),
        "spec_greedy_equal": spec_out[0].token_ids == base_out[0].token_ids,
        "spec_vs_group_tok_s": round((n_spec / spec_s) / (tokens / group_s), 3),
        "kvq_vs_group": round(group_s / kvq_s, 3),
        "kvq_memory_ratio": round(cache.nbytes() / full_bytes, 3),
    }
    if not a.json:
        for k, v in fig.items():
            print(f"{k:>24}: {v}")
    print(json.dumps(fig) if a.json else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
