"""Token sampling with exact logprobs: temperature, nucleus (top-p), greedy.

Pure functions on logits tensors; shared by the hf backend's decoding loop and
speculative decoding.
"""

from __future__ import annotations

import torch


def tempered_logprobs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """``log_softmax(logits / temperature)`` in float32; greedy (0) uses temperature 1.

    Args:
        logits: (rows, vocab) raw next-token logits.
    Returns:
        (rows, vocab) float32 natural-log probabilities.
    """
    logits = logits.float()
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    return torch.log_softmax(logits, dim=-1)


def nucleus_probs(logprobs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Sampling probabilities after top-p truncation, renormalised.

    Keeps the smallest set of most likely tokens whose mass reaches ``top_p``
    (at least one token), after Holtzman et al., arXiv:1904.09751.

    Args:
        logprobs: (rows, vocab) tempered log-probabilities.
    Returns:
        (rows, vocab) float32 probabilities summing to 1 per row.
    """
    probs = logprobs.exp()
    if top_p >= 1.0:
        return probs
    sorted_p, order = probs.sort(dim=-1, descending=True)  # (rows, vocab)
    mass_before = sorted_p.cumsum(dim=-1) - sorted_p
    drop_sorted = mass_before >= top_p  # the first token always has mass_before 0
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    probs = probs.masked_fill(drop, 0.0)
    return probs / probs.sum(dim=-1, keepdim=True)


def sample_next(
    logits: torch.Tensor,
    temperature: float,
    top_p: float,
    generator: torch.Generator | None = None,
    uniform: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick one next token per row.

    Args:
        logits: (rows, vocab) next-token logits.
        temperature: 0 = greedy argmax.
        top_p: nucleus mass in (0, 1].
        generator: torch generator for reproducible sampling (on logits' device).
        uniform: optional (rows, vocab) U[0, 1) draws; when given, the token is
            picked by the Gumbel-max trick, ``argmax(log p + Gumbel(u))``, an exact
            sample of ``p``. Callers pass draws made for every row of a batch so a
            row's samples do not depend on which other rows are still decoding.
    Returns:
        ``(tokens, logprobs)``: (rows,) int64 token ids and (rows,) float32 logprobs of
        those tokens under ``log_softmax(logits / temperature)`` (before top-p).
    """
    lp = tempered_logprobs(logits, temperature)
    if temperature == 0:
        tokens = lp.argmax(dim=-1)
    else:
        probs = nucleus_probs(lp, top_p)
        if uniform is not None:
            gumbel = -torch.log(-torch.log(uniform.clamp_min(1e-20)))
            tokens = (probs.log() + gumbel).argmax(dim=-1)
        else:
            tokens = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
    return tokens, lp.gather(-1, tokens[:, None]).squeeze(-1)


def make_generator(seed: int | None, device: torch.device) -> torch.Generator | None:
    """A torch generator on ``device`` seeded with ``seed``; None when seed is None."""
    if seed is None:
        return None
    gen = torch.Generator(device=device)
    gen.manual_seed(int(seed))
    return gen
