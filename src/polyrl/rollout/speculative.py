"""Speculative decoding for the hf backend: a small draft proposes, the policy verifies.

After Leviathan, Kalman & Matias, "Fast Inference from Transformers via
Speculative Decoding" (arXiv:2211.17192) and Chen et al., "Accelerating Large
Language Model Decoding with Speculative Sampling" (arXiv:2302.01318). Each
round the draft samples ``k`` tokens from its distribution ``q``; the policy
scores all of them in one forward pass (``k + 1`` positions) giving ``p``;
token ``i`` is accepted with probability ``min(1, p_i(x) / q_i(x))``; the first
rejected one is replaced by a sample of ``norm(max(0, p_i - q_i))``; when all
``k`` are accepted a bonus token is sampled from ``p_k``. The output follows
the policy's distribution exactly (with greedy decoding: the policy's argmax),
and the recorded logprobs are the policy's own (``log_softmax(logits / T)``).

Trade-off: one round costs ``k`` draft steps + one policy pass over ``k + 1``
tokens and yields ``1 + accepted`` tokens; it pays off when the draft is much
cheaper than the policy and agrees with it often. Here it decodes one row at a
time (rows accept different numbers of tokens), so for GRPO groups it
competes with batched group sampling, which usually wins on throughput; its
use is latency of single long samples. Both models must share the tokenizer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from polyrl.rollout.base import SamplingParams, find_stop
from polyrl.rollout.hf_decode import RowOutput, _StopWatcher, model_step
from polyrl.rollout.sampling import nucleus_probs, tempered_logprobs


class _Stream:
    """One model's cache over a batch-1 sequence (no padding)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.cache: Any = None
        self.length = 0  # tokens in the cache
        self.device = next(model.parameters()).device

    def feed(self, tokens: list[int], all_positions: bool = False) -> torch.Tensor:
        """Append ``tokens``; returns logits (vocab,) of the last or (len, vocab) of all."""
        n = len(tokens)
        ids = torch.tensor([tokens], device=self.device)
        mask = torch.ones((1, self.length + n), dtype=torch.long, device=self.device)
        pos = torch.arange(self.length, self.length + n, device=self.device)[None]
        logits, self.cache = model_step(self.model, ids, mask, pos, self.cache, all_positions)
        self.length += n
        return logits[0]

    def crop_to(self, length: int) -> None:
        if length < self.length:
            self.cache.crop(length - self.length)  # negative: tokens to remove
            self.length = length


def _dist(logits: torch.Tensor, sampling: SamplingParams) -> tuple[torch.Tensor, torch.Tensor]:
    """(logprobs, sampling probs) for logits (..., vocab); greedy gives one-hot probs."""
    lp = tempered_logprobs(logits, sampling.temperature)
    if sampling.temperature == 0:
        probs = torch.zeros_like(lp).scatter(-1, lp.argmax(-1, keepdim=True), 1.0)
        return lp, probs
    return lp, nucleus_probs(lp, sampling.top_p)


def _draw(probs: torch.Tensor, generator: torch.Generator | None) -> int:
    return int(torch.multinomial(probs, 1, generator=generator).item())


def verify_proposals(
    p: torch.Tensor,
    q: torch.Tensor,
    props: list[int],
    greedy: bool,
    generator: torch.Generator | None = None,
) -> list[int]:
    """The speculative-sampling acceptance rule for one round.

    Args:
        p: (k + 1, vocab) policy sampling probabilities at the k proposal positions
            and the bonus position; q: (k, vocab) draft probabilities the proposals
            were drawn from; props: the k proposed ids; greedy: p and q are one-hot.
    Returns:
        the accepted proposals followed by one policy token (the correction at the
        first rejection, or the bonus token when all k are accepted); each output
        token is distributed exactly as a sample from ``p``.
    """
    new: list[int] = []
    for i, x in enumerate(props):
        if greedy:
            ok = bool(p[i, x] > 0)
        else:
            u = torch.rand((), generator=generator, device=p.device)
            ok = bool(u * q[i, x] < p[i, x])  # u < p/q
        if ok:
            new.append(x)
            continue
        residual = (p[i] - q[i]).clamp_min(0)
        if greedy or residual.sum() <= 0:
            new.append(int(p[i].argmax()))
        else:
            new.append(_draw(residual / residual.sum(), generator))
        return new
    k = len(props)
    new.append(int(p[k].argmax()) if greedy else _draw(p[k], generator))
    return new


def speculative_decode(
    target: Any,
    draft: Any,
    prompt: list[int],
    sampling: SamplingParams,
    *,
    max_new: int,
    eos_ids: set[int],
    decode: Callable[[list[int]], str],
    generator: torch.Generator | None = None,
    num_draft_tokens: int = 4,
    stats: dict[str, float] | None = None,
) -> RowOutput:
    """Sample one continuation of ``prompt`` from ``target`` with ``draft`` proposals.

    Args:
        prompt: (prompt_len,) ids, non-empty; max_new: new-token limit;
        num_draft_tokens: proposals per round (k); stats: counters
            ``spec_proposed``/``spec_accepted``/``spec_rounds`` are added to it.
    Returns:
        a ``RowOutput`` (token ids, policy logprobs, finish reason, text cut at stops).
    """
    tgt, drf = _Stream(target), _Stream(draft)
    if len(prompt) > 1:  # each cache holds ctx[:length]; ctx[length:] is fed next
        tgt.feed(prompt[:-1])
        drf.feed(prompt[:-1])
    ctx = list(prompt)
    toks: list[int] = []
    lps: list[float] = []
    watcher = _StopWatcher(sampling.stop, decode)
    greedy = sampling.temperature == 0
    reason = "length"
    proposed = accepted = rounds = 0
    while reason != "stop" and len(toks) < max_new:
        k = max(1, min(num_draft_tokens, max_new - len(toks) - 1))
        base_d = drf.length
        pend_d = len(ctx) - base_d
        logits = drf.feed(ctx[base_d:])
        props: list[int] = []
        q_rows = []
        for i in range(k):
            q = _dist(logits, sampling)[1]  # (vocab,)
            x = int(q.argmax()) if greedy else _draw(q, generator)
            props.append(x)
            q_rows.append(q)
            if i < k - 1:
                logits = drf.feed([x])
        base_t = tgt.length
        pend_t = ctx[base_t:]
        p_lp, p = _dist(tgt.feed(pend_t + props, all_positions=True)[-(k + 1):], sampling)
        rounds += 1
        proposed += k
        new = verify_proposals(p, torch.stack(q_rows), props, greedy, generator)
        n_ok = len(new) - 1
        accepted += n_ok
        for j, x in enumerate(new):
            toks.append(x)
            ctx.append(x)
            lps.append(float(p_lp[j, x]))
            if x in eos_ids or watcher.hit(toks):
                reason = "stop"
                break
            if len(toks) >= max_new:
                break
        # Drop cache entries of rejected proposals (and keep the newest token pending).
        tgt.crop_to(min(base_t + len(pend_t) + n_ok, len(ctx) - 1))
        drf.crop_to(min(base_d + pend_d + min(n_ok, k - 1), len(ctx) - 1))
    if stats is not None:
        stats["spec_proposed"] = stats.get("spec_proposed", 0) + proposed
        stats["spec_accepted"] = stats.get("spec_accepted", 0) + accepted
        stats["spec_rounds"] = stats.get("spec_rounds", 0) + rounds
    text = decode(toks)
    i = find_stop(text, sampling.stop) if sampling.stop else -1
    return RowOutput(toks, lps, reason, text if i < 0 else text[:i])
