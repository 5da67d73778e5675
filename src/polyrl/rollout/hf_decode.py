"""The hf backend's decoding loop: batched, left-padded, one prefill per prompt.

``decode_batch`` prefills a left-padded batch of distinct prompts once, then
expands the KV cache ``repeats`` times along the batch (prefix reuse: the G
samples of a GRPO group share the prompt's prefill) and samples all rows
together, one forward pass per step. Rows that finish (EOS, stop string,
token limit) are dropped from the batch and the cache, so late steps only pay
for live rows. Logprobs are read from the very logits the token was sampled
from, so they are exact (see ``polyrl.rollout.sampling``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from polyrl.rollout.base import SamplingParams, find_stop
from polyrl.rollout.sampling import sample_next


@dataclass
class RowOutput:
    """One decoded row.

    Attributes:
        token_ids: sampled ids (EOS included when it ended the row);
        logprobs: (len(token_ids),) sampling logprobs;
        finish_reason: ``"stop"`` or ``"length"``;
        text: decoded text, cut before the first stop string.
    """

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    text: str


def _forward_names(model: Any) -> tuple[str, str | None]:
    """Names of the cache kwarg and the keep-last-logits kwarg of ``model.forward``."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    params = inspect.signature(type(base).forward).parameters
    cache_kw = "cache" if "cache" in params else "past_key_values"
    if "logits_to_keep" in params:
        return cache_kw, "logits_to_keep"
    return cache_kw, "num_logits_to_keep" if "num_logits_to_keep" in params else None


def model_step(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    cache: Any,
    all_positions: bool = False,
) -> tuple[torch.Tensor, Any]:
    """One forward pass returning the last position's logits and the updated cache.

    Args:
        input_ids: (rows, new) ids; attention_mask: (rows, past + new) 0/1;
        position_ids: (rows, new); cache: a transformers ``Cache`` or None;
        all_positions: return logits of every new position.
    Returns:
        ``(logits, cache)``: (rows, vocab) float32 logits of the last position, or
        (rows, new, vocab) with ``all_positions``.
    """
    cache_kw, keep_kw = _forward_names(model)
    kwargs: dict[str, Any] = {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "position_ids": position_ids,
        "use_cache": True,
        cache_kw: cache,
    }
    if keep_kw and not all_positions:
        kwargs[keep_kw] = 1
    out = model(**kwargs)
    new_cache = getattr(out, "cache", None)
    if new_cache is None:
        new_cache = out.past_key_values
    if all_positions:
        return out.logits.float(), new_cache
    return out.logits[:, -1].float(), new_cache


def left_pad(prompts: list[list[int]], pad_id: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    """Left-pad prompts into ``(input_ids, attention_mask, position_ids)``, each (rows, max_len)."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        if p:
            ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            mask[i, width - len(p) :] = 1
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids.to(device), mask.to(device), pos.to(device)


class _StopWatcher:
    """Detects stop strings on a row's recent tokens without decoding it all each step."""

    def __init__(self, stop: tuple[str, ...], decode: Callable[[list[int]], str]) -> None:
        self.stop = stop
        self.decode = decode
        self.window = 4 * max((len(s) for s in stop), default=0) + 8  # tokens

    def hit(self, ids: list[int]) -> bool:
        return bool(self.stop) and find_stop(self.decode(ids[-self.window :]), self.stop) >= 0


def decode_batch(
    model: Any,
    prompts: list[list[int]],
    repeats: int,
    sampling: SamplingParams,
    *,
    max_new: list[int],
    eos_ids: set[int],
    pad_id: int,
    decode: Callable[[list[int]], str],
    generator: torch.Generator | None = None,
    cache: Any = None,
) -> list[RowOutput]:
    """Sample ``repeats`` continuations of each prompt; one prefill per prompt.

    Args:
        prompts: P token-id lists (non-empty).
        repeats: samples per prompt (G); the prompt's KV cache is expanded G times.
        max_new: (P,) new-token limit per prompt (``sampling.max_tokens`` clipped
            to the context window).
        eos_ids: ids that end a row (kept as its last token).
        decode: ids -> text (special tokens skipped).
        cache: an empty transformers ``Cache`` to prefill into (e.g. a quantized
            cache), or None for the model's default dynamic cache.
    Returns:
        ``P * repeats`` rows, prompt-major.
    """
    device = next(model.parameters()).device
    ids, mask, pos = left_pad(prompts, pad_id, device)
    logits, cache = model_step(model, ids, mask, pos, cache)  # (P, V)
    if repeats > 1:
        cache.batch_repeat_interleave(repeats)
        logits = logits.repeat_interleave(repeats, dim=0)  # (P*G, V)
        mask = mask.repeat_interleave(repeats, dim=0)  # (P*G, L)
    rows = len(prompts) * repeats
    next_pos = torch.tensor([len(p) for p in prompts], device=device).repeat_interleave(repeats)
    limits = [max_new[r // repeats] for r in range(rows)]
    toks: list[list[int]] = [[] for _ in range(rows)]
    lps: list[list[float]] = [[] for _ in range(rows)]
    reasons = ["length"] * rows
    active = list(range(rows))  # global row index of each batch position
    watcher = _StopWatcher(sampling.stop, decode)
    live = torch.arange(rows, device=device)  # (R,) global rows still decoding
    while active:
        uniform = None
        if sampling.temperature > 0:  # draws for all rows: a row's stream ignores the others
            uniform = torch.rand((rows, logits.shape[-1]), generator=generator, device=device)
            uniform = uniform[live]
        tok, lp = sample_next(logits, sampling.temperature, sampling.top_p, uniform=uniform)
        tok_l, lp_l = tok.tolist(), lp.tolist()
        keep: list[int] = []
        for j, r in enumerate(active):
            toks[r].append(tok_l[j])
            lps[r].append(lp_l[j])
            if tok_l[j] in eos_ids or watcher.hit(toks[r]):
                reasons[r] = "stop"
            elif len(toks[r]) < limits[r]:
                keep.append(j)
        if not keep:
            break
        if len(keep) < len(active):  # drop finished rows from the batch and the cache
            sel = torch.tensor(keep, device=device)
            cache.batch_select_indices(sel)
            tok, mask, next_pos, live = tok[sel], mask[sel], next_pos[sel], live[sel]
            active = [active[j] for j in keep]
        mask = torch.cat([mask, mask.new_ones((len(active), 1))], dim=1)  # (R, L + t)
        logits, cache = model_step(model, tok[:, None], mask, next_pos[:, None], cache)
        next_pos = next_pos + 1
    outs = []
    for r in range(rows):
        text = decode(toks[r])
        i = find_stop(text, sampling.stop) if sampling.stop else -1
        outs.append(RowOutput(toks[r], lps[r], reasons[r], text if i < 0 else text[:i]))
    return outs
