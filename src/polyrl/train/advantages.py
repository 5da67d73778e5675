"""Group-relative advantages and the reward-side options of DAPO.

GRPO (arXiv 2402.03300, section 4.1.2) replaces a value network by the group:
the advantage of each of the G completions of one prompt is its reward minus the
group mean, divided by the group standard deviation. Dr. GRPO (arXiv 2503.20783)
drops the division (``scale="none"``) because it over-weights groups that are
nearly all right or all wrong. DAPO (arXiv 2503.14476) drops groups whose
rewards are all equal (dynamic sampling: they carry no gradient) and penalises
completions that run into the length limit (soft overlong punishment).
"""

from __future__ import annotations

import torch

STD_EPS = 1e-4
"""Added to the group std before dividing (the value TRL uses)."""


def group_advantages(rewards: torch.Tensor, scale: str = "group") -> torch.Tensor:
    """Group-normalised advantages.

    Args:
        rewards: (n_groups, G) float rewards; row i holds the G completions of prompt i.
        scale: ``"group"`` divide by each group's std (GRPO), ``"batch"`` by the std of
            all rewards, ``"none"`` do not divide (Dr. GRPO). The std is the unbiased
            sample std (Bessel's correction), plus ``STD_EPS``.

    Returns:
        (n_groups, G) advantages; a group of equal rewards gets all zeros.

    Raises:
        ValueError: ``rewards`` is not 2-D, or an unknown ``scale``.
    """
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be (n_groups, G), got shape {tuple(rewards.shape)}")
    centred = rewards - rewards.mean(dim=1, keepdim=True)  # (N, G)
    # a group of equal rewards: exact zeros (the float mean of e.g. seven 0.7s is off by an
    # ulp, which the STD_EPS division below would blow up to an advantage of ~6e-4)
    equal = (rewards.amax(dim=1, keepdim=True) == rewards.amin(dim=1, keepdim=True))
    centred = centred.masked_fill(equal, 0.0)
    if scale == "none":
        return centred
    if scale == "group":
        std = rewards.std(dim=1, keepdim=True) if rewards.shape[1] > 1 else torch.zeros_like(
            rewards[:, :1])
        return centred / (std + STD_EPS)
    if scale == "batch":
        std = rewards.std() if rewards.numel() > 1 else torch.zeros(())
        return centred / (std + STD_EPS)
    raise ValueError(f"scale must be 'group', 'batch' or 'none', got {scale!r}")


def zero_variance(rewards: torch.Tensor, atol: float = 1e-6) -> torch.Tensor:
    """Which groups carry no learning signal (all rewards equal).

    Args:
        rewards: (n_groups, G) rewards.
        atol: rewards within this of the group's first are "equal".

    Returns:
        (n_groups,) bool, True where every reward of the group is equal
        (DAPO's dynamic sampling drops these, arXiv 2503.14476 eq. 11).
    """
    return (rewards - rewards[:, :1]).abs().amax(dim=1) <= atol


def overlong_penalty(lengths: torch.Tensor, max_tokens: int, buffer_tokens: int) -> torch.Tensor:
    """DAPO's soft overlong punishment (arXiv 2503.14476 eq. 13), added to the reward.

    With ``L_max = max_tokens`` and ``L_cache = buffer_tokens``: 0 for lengths up to
    ``L_max - L_cache``, then linear down to -1 at ``L_max``, and -1 beyond.

    Args:
        lengths: (n,) completion lengths in tokens.
        max_tokens: the generation limit ``L_max``, tokens.
        buffer_tokens: ``L_cache``, tokens; 0 disables the penalty (returns zeros).

    Returns:
        (n,) float penalties in [-1, 0].
    """
    lengths = lengths.to(torch.float32)
    if buffer_tokens <= 0:
        return torch.zeros_like(lengths)
    start = max_tokens - buffer_tokens
    penalty = (start - lengths) / buffer_tokens
    return penalty.clamp(min=-1.0, max=0.0)


def signal_stats(rewards: torch.Tensor, advantages: torch.Tensor) -> dict[str, float]:
    """How much learning signal a set of groups carries (the curriculum's inputs).

    Args:
        rewards: (n_groups, G) rewards in [0, 1].
        advantages: (n_groups, G) advantages.

    Returns:
        ``{"p1p": mean over groups of p(1-p) with p the group's mean reward,
        "abs_adv": mean |advantage|, "zero_variance": share of groups with equal rewards}``.
    """
    p = rewards.mean(dim=1)  # (N,)
    return {
        "p1p": float((p * (1 - p)).mean()),
        "abs_adv": float(advantages.abs().mean()),
        "zero_variance": float(zero_variance(rewards).float().mean()),
    }
