"""Numerical consistency of the trainer's RL math on a tiny real model.

At the first step the policy *is* the reference model, so the per-token KL must be
exactly 0 and the policy's training-time log-probs must be those it sampled with;
anything else is noise that the KL term, the PPO ratio and the replay importance
weights then train on.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from polyrl.train import Trainer
from polyrl.train.logprobs import dense_logprobs

from .conftest import tiny_policy
from .test_trainer import domains, small_cfg


@pytest.mark.parametrize("lora", [False, True])
def test_reference_logprobs_run_under_the_policys_autocast(tmp_path, lora):
    """With bf16 autocast (what a CUDA run uses), the reference forward must use the same
    autocast as the policy's: it ran in full precision, so a policy equal to its
    reference read KL 2.3e-7 per token (and a k3 gradient pulling on rounding noise)."""
    extra = {"lora": True, "lora_rank": 4} if lora else {}
    trainer = Trainer(small_cfg(kl_coef=0.2, **extra), tiny_policy(), domains(), tmp_path)
    trainer.opts = dataclasses.replace(trainer.opts, autocast_dtype=torch.bfloat16)
    rec = trainer.fit(steps=1)[0]
    assert rec["loss/kl"] == 0.0


def _with_attention_dropout(policy, p: float):
    policy.model.config.attention_dropout = p
    for layer in policy.model.model.layers:
        layer.self_attn.attention_dropout = p
    return policy


def test_training_forward_has_no_dropout(tmp_path):
    """A model whose config has dropout (many hub models do) sampled in eval mode but was
    trained in train mode: its training log-probs were noisy copies of the sampling ones,
    so at step 1 (policy == reference) the KL read 1.1e-3 instead of 0, and the PPO ratio
    and replay weights carried the same noise."""
    policy = _with_attention_dropout(tiny_policy(), 0.3)
    trainer = Trainer(small_cfg(kl_coef=0.2), policy, domains(), tmp_path)
    rec = trainer.fit(steps=1)[0]
    assert rec["loss/kl"] == 0.0
    trainer.model.train()
    prompts, comps = [[1, 40, 41, 42]] * 2, [[50, 51, 52, 2], [53, 2]]
    with torch.no_grad():
        a = dense_logprobs(trainer.model, prompts, comps).logprobs
        b = dense_logprobs(trainer.model, prompts, comps).logprobs
        trainer.model.eval()
        c = dense_logprobs(trainer.model, prompts, comps).logprobs
    assert torch.equal(a, b) and torch.equal(a, c)  # train mode == eval mode (sampling)


def test_disable_dropout_zeroes_modules_and_attention_rates():
    from polyrl.train.trainer import disable_dropout

    policy = _with_attention_dropout(tiny_policy(), 0.1)
    model = torch.nn.Sequential(policy.model, torch.nn.Dropout(0.5), torch.nn.Dropout1d(0.2))
    assert disable_dropout(model) == 2 + len(policy.model.model.layers)
    dropouts = [m for m in model.modules() if isinstance(m, torch.nn.modules.dropout._DropoutNd)]
    assert all(m.p == 0.0 for m in dropouts)
    assert all(layer.self_attn.attention_dropout == 0.0 for layer in policy.model.model.layers)
    assert policy.model.config.attention_dropout == 0.1  # the saved config is left alone


def _tiny(seed: int):
    from polyrl.models.tiny import build_tiny_model

    return build_tiny_model(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64,
                            seed=seed)


def _sequence_logprobs(model, prompt, completion, temperature):
    """(len(completion),) log-probs from one unpadded forward of prompt + completion."""
    logits = model(input_ids=torch.tensor([prompt + completion])).logits[0]
    logits = logits[len(prompt) - 1:-1].float() / temperature
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(completion)[:, None])[:, 0]


@pytest.mark.parametrize("loss_agg", ["token-mean", "seq-mean-token-mean",
                                      "seq-mean-token-sum", "seq-mean-token-sum-norm"])
@pytest.mark.parametrize("shared_prefix", [True, False])
def test_accumulated_gradient_equals_the_full_batch_loss_written_out(loss_agg, shared_prefix):
    """Micro-batches of 1 (and 3), merged repeats, a loss mask, a replayed group's clipped
    importance weights and the k3 KL against a separate reference model: the accumulated
    gradient equals that of the step's loss written out per sequence from the papers."""
    from polyrl.train.groups import Group
    from polyrl.train.update import UpdateOptions, chunk_logprobs, policy_update
    from polyrl.types import Task

    task = Task(id="t", domain="d/x-v1", split="train", difficulty=1, prompt=[], reference="")
    groups = [
        Group(task, 0, [5, 6, 7], [[10, 11, 12], [13], [10, 11, 12], [14, 15, 16, 17, 18]],
              [[]] * 4, [1, 0, 1, 0.5], [0.9, -1.1, 0.9, 0.2], 0,
              loss_masks=[[1, 1, 1], [1], [1, 1, 1], [1, 0, 0, 1, 1]]),
        Group(task, 0, [8, 9], [[20, 21], [22, 23, 24, 25, 26, 27], [28]],
              [[-3.0, -4.0], [-5.0] * 6, [-6.0]], [1, 0, 0], [1.2, -0.6, -0.6], 0,
              replayed=True)]
    temp, beta, max_tokens, ref_model = 0.8, 0.1, 9, _tiny(1)
    written, fast = _tiny(0), _tiny(0)
    terms, n_tok, n_seq = [], 0.0, 0
    for g in groups:
        for i, comp in enumerate(g.completions):
            lp = _sequence_logprobs(written, g.prompt_ids, comp, temp)
            with torch.no_grad():
                ref = _sequence_logprobs(ref_model, g.prompt_ids, comp, temp)
            ratio, adv = torch.exp(lp - lp.detach()), g.advantages[i]
            tok = -torch.min(ratio * adv, ratio.clamp(0.8, 1.2) * adv)
            if g.replayed:
                mu = torch.tensor(g.behaviour_logprobs[i])
                tok = tok * torch.exp(lp.detach() - mu).clamp(max=2.0)
            tok = tok + beta * (torch.exp(ref - lp) - (ref - lp) - 1)
            mask = torch.tensor(g.mask(i), dtype=torch.float32)
            terms.append(((tok * mask).sum(), mask.sum()))
            n_tok, n_seq = n_tok + float(mask.sum()), n_seq + 1
    loss = {"token-mean": sum(s for s, _ in terms) / n_tok,
            "seq-mean-token-mean": sum(s / m for s, m in terms) / n_seq,
            "seq-mean-token-sum": sum(s for s, _ in terms) / n_seq,
            "seq-mean-token-sum-norm": sum(s for s, _ in terms) / (n_seq * max_tokens)}[loss_agg]
    loss.backward()
    for micro in (1, 3):
        fast.zero_grad()
        opts = UpdateOptions(loss_agg=loss_agg, kl_coef=beta, micro_batch_size=micro,
                             shared_prefix=shared_prefix, temperature=temp,
                             max_tokens=max_tokens, max_grad_norm=1e9, is_clip=2.0)
        policy_update(fast, torch.optim.SGD(fast.parameters(), lr=0.0), groups, opts,
                      lambda chunk, o=opts: chunk_logprobs(ref_model, chunk, o, False).logprobs,
                      step_optimizer=False)
        for a, b in zip(written.parameters(), fast.parameters(), strict=True):
            err = float((a.grad - b.grad).abs().max() / a.grad.abs().max().clamp(min=1e-12))
            assert err < 1e-5, (loss_agg, micro, err)  # fp32 summation-order noise: ~1e-6
