"""Token sampling: greedy, nucleus truncation, Gumbel-max with given draws."""

from __future__ import annotations

import pytest
import torch

from polyrl.rollout.sampling import nucleus_probs, sample_next


def test_nucleus_keeps_smallest_top_set() -> None:
    lp = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    p = nucleus_probs(lp, 0.7)
    assert torch.allclose(p, torch.tensor([[0.625, 0.375, 0.0, 0.0]]))
    tok, lps = sample_next(torch.tensor([[0.0, 5.0, 1.0]]), 0.0, 1.0)
    assert tok.tolist() == [1] and lps.item() == pytest.approx(
        torch.log_softmax(torch.tensor([0.0, 5.0, 1.0]), -1)[1].item())


def test_gumbel_draws_sample_the_distribution() -> None:
    gen = torch.Generator().manual_seed(0)
    logits = torch.log(torch.tensor([[0.1, 0.6, 0.3]])).repeat(20000, 1)
    tok, lp = sample_next(logits, 1.0, 1.0, uniform=torch.rand(logits.shape, generator=gen))
    freq = torch.bincount(tok, minlength=3).float() / len(tok)
    assert torch.allclose(freq, torch.tensor([0.1, 0.6, 0.3]), atol=0.015)
    assert torch.allclose(lp.exp(), torch.tensor([0.1, 0.6, 0.3])[tok], atol=1e-5)
    tok, _ = sample_next(logits[:2000], 1.0, 0.5, uniform=torch.rand((2000, 3), generator=gen))
    assert set(tok.tolist()) == {1}  # top-p 0.5 keeps only the most likely token
