"""Training forward passes: dense and shared-prefix agree with a plain per-sequence forward."""

from __future__ import annotations

import pytest
import torch

from polyrl.train.logprobs import dense_logprobs, shared_prefix_logprobs

from .conftest import tiny_model


def _batch(seed: int):
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(3, 259, (n,), generator=g).tolist() for n in (5, 11, 2)]
    groups = [[torch.randint(3, 259, (int(n),), generator=g).tolist()
               for n in torch.randint(1, 10, (k,), generator=g)] for k in (4, 3, 2)]
    return prompts, groups


def _plain(model, prompt, completion, temperature):
    """Ground truth: one unpadded sequence at a time."""
    ids = torch.tensor([prompt + completion])
    logits = model(input_ids=ids).logits[0, len(prompt) - 1:-1] / temperature
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(completion)[:, None])[:, 0]


def test_dense_matches_plain_forward():
    model = tiny_model(seed=1)
    prompts, groups = _batch(0)
    flat_p = [p for p, g in zip(prompts, groups, strict=True) for _ in g]
    flat_c = [c for g in groups for c in g]
    with torch.no_grad():
        out = dense_logprobs(model, flat_p, flat_c, temperature=0.8)
        for i, (p, c) in enumerate(zip(flat_p, flat_c, strict=True)):
            assert torch.allclose(out.logprobs[i, : len(c)], _plain(model, p, c, 0.8), atol=1e-5)
            assert out.mask[i].sum() == len(c)


def test_shared_prefix_matches_dense_values_and_gradients():
    model = tiny_model(seed=2)
    prompts, groups = _batch(1)
    flat_p = [p for p, g in zip(prompts, groups, strict=True) for _ in g]
    dense = dense_logprobs(model, flat_p, [c for g in groups for c in g], temperature=0.7,
                           with_entropy=True)
    shared = shared_prefix_logprobs(model, prompts, groups, temperature=0.7, with_entropy=True)
    assert torch.equal(dense.mask, shared.mask)
    assert (dense.logprobs - shared.logprobs).abs().max() < 1e-5
    assert ((dense.entropy - shared.entropy) * dense.mask).abs().max() < 1e-5
    weights = torch.randn(dense.logprobs.shape, generator=torch.Generator().manual_seed(0))
    params = list(model.parameters())
    g_dense = torch.autograd.grad((dense.logprobs * weights).sum(), params)
    g_shared = torch.autograd.grad((shared.logprobs * weights).sum(), params)
    assert max((a - b).abs().max().item() for a, b in zip(g_dense, g_shared, strict=True)) < 1e-5


def test_single_token_completions_and_bad_input():
    model = tiny_model(seed=3)
    out = shared_prefix_logprobs(model, [[5, 6, 7]], [[[9], [10]]])
    assert out.logprobs.shape == (2, 1)
    with pytest.raises(ValueError):
        shared_prefix_logprobs(model, [[5]], [[]])
    with pytest.raises(ValueError):
        dense_logprobs(model, [[]], [[5]])
