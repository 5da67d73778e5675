"""GRPO-family losses: hand-computed values, TRL equality, and accumulation invariance."""

from __future__ import annotations

import math

import pytest
import torch

from polyrl.train.groups import Group
from polyrl.train.logprobs import dense_logprobs
from polyrl.train.losses import LOSS_AGGREGATIONS, aggregate, grpo_loss, kl_penalty
from polyrl.train.update import UpdateOptions, policy_update
from polyrl.types import Task

from .conftest import tiny_model


def test_aggregations_by_hand():
    per_token = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    assert aggregate(per_token, mask, "token-mean").item() == pytest.approx(10 / 4)
    assert aggregate(per_token, mask, "seq-mean-token-mean").item() == pytest.approx((2 + 4) / 2)
    assert aggregate(per_token, mask, "seq-mean-token-sum").item() == pytest.approx((6 + 4) / 2)
    assert aggregate(per_token, mask, "seq-mean-token-sum-norm", max_tokens=5).item() == \
        pytest.approx(10 / (2 * 5))
    assert aggregate(per_token, mask, "token-mean", normalizer=8.0).item() == pytest.approx(10 / 8)
    with pytest.raises(ValueError, match="loss_agg"):
        aggregate(per_token, mask, "mean")


def test_kl_estimators():
    lp = torch.tensor([-1.0, -2.0])
    ref = torch.tensor([-1.5, -1.0])
    assert torch.allclose(kl_penalty(lp, ref, "k1"), lp - ref)
    k3 = kl_penalty(lp, ref, "k3")
    d = ref - lp
    assert torch.allclose(k3, torch.exp(d) - d - 1)
    assert (k3 >= 0).all()
    assert kl_penalty(lp, lp, "k3").abs().max() == 0
    with pytest.raises(ValueError):
        kl_penalty(lp, ref, "k2")


def test_clip_higher_blocks_gradient_outside_the_range():
    old = torch.zeros(1, 3)
    # ratios e^0.3 (above 1.28), e^0.1 (inside), e^-0.5 (below 0.8)
    lp = torch.tensor([[0.3, 0.1, -0.5]], requires_grad=True)
    mask = torch.ones(1, 3)
    out = grpo_loss(lp, old, torch.tensor([1.0]), mask, clip_eps_low=0.2, clip_eps_high=0.28,
                    loss_agg="token-mean")
    out.loss.backward()
    g = lp.grad[0]
    assert g[0] == 0  # positive advantage, ratio above 1 + eps_high: clipped
    assert g[1] == pytest.approx(-math.exp(0.1) / 3)
    assert g[2] == pytest.approx(-math.exp(-0.5) / 3)  # A > 0, low side is not clipped
    assert out.clip_fraction.item() == pytest.approx(1 / 3)
    lp2 = lp.detach().clone().requires_grad_(True)
    out = grpo_loss(lp2, old, torch.tensor([-1.0]), mask, clip_eps_low=0.2, clip_eps_high=0.28,
                    loss_agg="token-mean")
    out.loss.backward()
    assert lp2.grad[0, 2] == 0 and lp2.grad[0, 0] != 0  # A < 0: the low side clips


def test_kl_needs_reference_and_shapes_must_match():
    lp = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="ref_logprobs"):
        grpo_loss(lp, lp, torch.zeros(2), torch.ones(2, 3), kl_coef=0.1)
    with pytest.raises(ValueError, match="same"):
        grpo_loss(lp, lp, torch.zeros(2), torch.ones(2, 4))


# --- equality with TRL's GRPOTrainer._compute_loss on identical tensors ---------------------

TRL_CASES = [
    # (TRL loss_type, polyrl loss_agg, beta, epsilon, epsilon_high, KL IS correction)
    ("grpo", "seq-mean-token-mean", 0.04, 0.2, 0.2, True),
    ("grpo", "seq-mean-token-mean", 0.04, 0.2, 0.2, False),
    ("dapo", "token-mean", 0.0, 0.2, 0.28, True),
    ("dr_grpo", "seq-mean-token-sum-norm", 0.1, 0.2, 0.28, False),
    ("bnpo", "token-mean", 0.04, 0.1, 0.3, True),
]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from polyrl.models.tiny import save_tiny

    return save_tiny(tmp_path_factory.mktemp("tiny"), seed=3, hidden_size=64, num_layers=2,
                     num_heads=2, intermediate_size=128)


def _trl_trainer(path, out_dir, loss_type, beta, eps, eps_high, max_len, temperature,
                 kl_is_correction=True):
    trl = pytest.importorskip("trl")
    from datasets import Dataset

    from polyrl.models.tiny import build_byte_tokenizer

    args = trl.GRPOConfig(
        output_dir=str(out_dir), per_device_train_batch_size=4, num_generations=4,
        max_completion_length=max_len, report_to=[], use_cpu=True, beta=beta,
        loss_type=loss_type, epsilon=eps, epsilon_high=eps_high, temperature=temperature,
        save_strategy="no", bf16=False, use_bias_correction_kl=kl_is_correction)
    trainer = trl.GRPOTrainer(
        model=str(path), reward_funcs=lambda completions, **kw: [0.0] * len(completions),
        args=args, train_dataset=Dataset.from_dict({"prompt": ["a", "b"]}),
        processing_class=build_byte_tokenizer())
    trainer.current_gradient_accumulation_steps = 1
    return trainer


@pytest.mark.parametrize("loss_type,loss_agg,beta,eps,eps_high,kl_is", TRL_CASES)
def test_loss_and_gradients_equal_trl(tiny_dir, tmp_path, loss_type, loss_agg, beta, eps,
                                      eps_high, kl_is):
    from transformers import AutoModelForCausalLM

    max_len, temp = 7, 0.7
    trainer = _trl_trainer(tiny_dir, tmp_path, loss_type, beta, eps, eps_high, max_len, temp,
                           kl_is)
    ours = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32)
    g = torch.Generator().manual_seed(0)
    # equal-length prompts: TRL's forward does not derive position ids from the mask
    prompts = [torch.randint(3, 259, (5,), generator=g).tolist() for _ in range(4)]
    lengths = [7, 3, 5, 1]
    comps = [torch.randint(3, 259, (n,), generator=g).tolist() for n in lengths]
    c_ids = torch.zeros(4, max_len, dtype=torch.long)
    c_mask = torch.zeros(4, max_len, dtype=torch.long)
    for i, c in enumerate(comps):
        c_ids[i, : len(c)] = torch.tensor(c)
        c_mask[i, : len(c)] = 1
    with torch.no_grad():
        base = dense_logprobs(ours, prompts, comps, temperature=temp).logprobs
    old = base + 0.3 * torch.randn(base.shape, generator=g)  # ratios land on both clip sides
    ref = base + 0.2 * torch.randn(base.shape, generator=g)
    adv = torch.tensor([1.2, -0.7, 0.4, -1.1])
    inputs = {"prompt_ids": torch.tensor(prompts), "prompt_mask": torch.ones(4, 5, dtype=torch.long),
              "completion_ids": c_ids, "completion_mask": c_mask, "advantages": adv,
              "old_per_token_logps": old, "ref_per_token_logps": ref,
              "num_items_in_batch": c_mask.sum()}
    trainer.model.train()
    trl_loss = trainer._compute_loss(trainer.model, inputs)
    trl_loss.backward()

    ours.train()
    lp = dense_logprobs(ours, prompts, comps, temperature=temp)
    out = grpo_loss(lp.logprobs, old, adv, lp.mask, clip_eps_low=eps, clip_eps_high=eps_high,
                    loss_agg=loss_agg, ref_logprobs=ref, kl_coef=beta, kl_estimator="k3",
                    kl_is_correction=kl_is, max_tokens=max_len)
    out.loss.backward()
    assert out.clip_fraction > 0  # the clip is exercised
    assert abs(out.loss.item() - trl_loss.item()) < 1e-5
    theirs = dict(trainer.model.named_parameters())
    worst = max((p.grad - theirs[n].grad).abs().max().item() for n, p in ours.named_parameters())
    assert worst < 1e-5


# --- gradient accumulation invariance: 8 micro-batches of 1 == 1 micro-batch of 8 ----------

def _groups(seed: int) -> list[Group]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for k in range(2):
        task = Task(id=f"t{k}", domain="test/echo-v1", split="train", difficulty=1,
                    prompt=[], reference="")
        comps = [torch.randint(3, 259, (int(n),), generator=g).tolist()
                 for n in torch.randint(1, 9, (4,), generator=g)]
        out.append(Group(task=task, arm=0, prompt_ids=torch.randint(3, 259, (6 + 3 * k,),
                                                                    generator=g).tolist(),
                         completions=comps, behaviour_logprobs=[[] for _ in comps],
                         rewards=[0.0, 1.0, 0.5, 0.0],
                         advantages=torch.randn(4, generator=g).tolist(), policy_version=0))
    return out


@pytest.mark.parametrize("loss_agg", LOSS_AGGREGATIONS)
@pytest.mark.parametrize("shared_prefix", [True, False])
def test_accumulation_8x1_equals_1x8(loss_agg, shared_prefix):
    groups = _groups(1)
    grads = []
    for mbs in (1, 8):
        model = tiny_model(seed=5)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        opts = UpdateOptions(loss_agg=loss_agg, micro_batch_size=mbs, max_tokens=8,
                             shared_prefix=shared_prefix, max_grad_norm=1e9)
        stats = policy_update(model, opt, groups, opts)
        assert stats.micro_batches == (8 if mbs == 1 else 1)
        grads.append({n: p.detach().clone() for n, p in model.named_parameters()})
    start = dict(tiny_model(seed=5).named_parameters())
    moved = max((grads[1][n] - start[n]).abs().max().item() for n in start)
    assert moved > 1e-6  # the update did something
    worst = max((grads[0][n] - grads[1][n]).abs().max().item() for n in start)
    assert worst < 1e-6
