"""Speculative decoding: exact policy distribution, greedy equality, exact logprobs."""

from __future__ import annotations

import torch

from polyrl.models.tiny import build_tiny_model
from polyrl.rollout import HFPolicy, SamplingParams
from polyrl.rollout.speculative import verify_proposals
from tests.rollout.conftest import make_task


def test_acceptance_rule_samples_policy_distribution() -> None:
    gen = torch.Generator().manual_seed(0)
    p = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25]])
    q = torch.tensor([[0.4, 0.3, 0.2, 0.1]])
    counts = torch.zeros(4)
    trials = 6000
    for _ in range(trials):
        x = int(torch.multinomial(q[0], 1, generator=gen))
        counts[verify_proposals(p, q, [x], greedy=False, generator=gen)[0]] += 1
    assert torch.allclose(counts / trials, p[0], atol=0.025)
    # Greedy: accept while the proposal is the policy's argmax, then correct.
    one_hot = torch.eye(4)
    assert verify_proposals(one_hot[[3, 1, 2]], one_hot[[3, 0]], [3, 0], greedy=True) == [3, 1]
    assert verify_proposals(one_hot[[3, 1, 2]], one_hot[[3, 1]], [3, 1], greedy=True) == [3, 1, 2]


def _disagreeing_draft() -> torch.nn.Module:
    draft = build_tiny_model(hidden_size=64, num_layers=1, num_heads=2, intermediate_size=128,
                             seed=7)
    bias = torch.randn(draft.config.vocab_size, generator=torch.Generator().manual_seed(1)) * 0.02
    draft.lm_head.register_forward_hook(lambda m, i, o: o + bias)
    return draft.eval()


def test_speculative_greedy_equals_plain_and_logprobs_exact(hf_policy: HFPolicy) -> None:
    model, tok = hf_policy.model, hf_policy.tokenizer
    spec = HFPolicy(model, tok, draft_model=_disagreeing_draft(), num_draft_tokens=3)
    tasks = [make_task(1), make_task(4)]
    greedy = SamplingParams(temperature=0, max_tokens=16)
    a = hf_policy.generate(tasks, 1, greedy)
    b = spec.generate(tasks, 1, greedy)
    assert [c.token_ids for c in a] == [c.token_ids for c in b]
    for x, y in zip(a, b, strict=True):
        assert torch.allclose(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-4)
    st = spec.stats.extra
    assert st["spec_proposed"] > 0 and 0 <= st["spec_accepted"] <= st["spec_proposed"]
    sampled = spec.generate(tasks, 2, SamplingParams(temperature=0.8, max_tokens=10, seed=2))
    for c in sampled:
        ids = torch.tensor([c.prompt_token_ids + c.token_ids])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, len(c.prompt_token_ids) - 1 : -1]
        ref = torch.log_softmax(logits / 0.8, -1).gather(-1, ids[0, -len(c.token_ids):, None])
        assert torch.allclose(ref.squeeze(-1), torch.tensor(c.logprobs), atol=1e-4)
