"""Group advantages, zero-variance detection and the DAPO overlong penalty."""

from __future__ import annotations

import pytest
import torch

from polyrl.train.advantages import (
    group_advantages,
    overlong_penalty,
    signal_stats,
    zero_variance,
)
from polyrl.train.groups import build_groups
from polyrl.types import Completion, Score, Task


def test_group_advantages_by_hand():
    r = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.5, 0.5, 0.5, 0.5]])
    adv = group_advantages(r, "group")
    std = torch.tensor([1.0, 0.0, 0.0, 1.0]).std()  # unbiased, as TRL
    assert torch.allclose(adv[0], (r[0] - 0.5) / (std + 1e-4))
    assert torch.equal(adv[1], torch.zeros(4))  # no signal in an all-equal group
    assert torch.allclose(group_advantages(r, "none")[0], r[0] - 0.5)  # Dr. GRPO
    assert torch.allclose(adv.sum(dim=1), torch.zeros(2), atol=1e-6)
    with pytest.raises(ValueError):
        group_advantages(r[0], "group")
    with pytest.raises(ValueError):
        group_advantages(r, "max")


def test_zero_variance_and_signal():
    r = torch.tensor([[1.0, 1.0], [0.0, 1.0], [0.3, 0.3]])
    assert zero_variance(r).tolist() == [True, False, True]
    s = signal_stats(r, group_advantages(r))
    assert s["p1p"] == pytest.approx((0 + 0.25 + 0.21) / 3)
    assert s["zero_variance"] == pytest.approx(2 / 3)


def test_overlong_penalty_dapo_shape():
    lengths = torch.tensor([10, 12, 14, 16, 20])
    p = overlong_penalty(lengths, max_tokens=16, buffer_tokens=4)
    assert p.tolist() == pytest.approx([0.0, 0.0, -0.5, -1.0, -1.0])
    assert overlong_penalty(lengths, 16, 0).abs().sum() == 0


def test_build_groups_leaves_out_failed_scores():
    task = Task(id="t", domain="d/x-v1", split="train", difficulty=1, prompt=[], reference="")
    comps = [Completion(task_id="t", text="", sample_index=j, prompt_token_ids=[5, 6],
                        token_ids=[7] * (j + 1), logprobs=[-1.0] * (j + 1)) for j in range(4)]
    scores = [Score(1.0), Score(0.0, error="SandboxError"), Score(0.0), Score(1.0)]
    groups, stats = build_groups([(task, 0)], comps, scores, group_size=4, version=3)
    assert stats.score_errors == 1 and len(groups) == 1
    g = groups[0]
    assert g.completions == [[7], [7, 7, 7], [7, 7, 7, 7]]  # the errored sample is gone
    assert g.rewards == [1.0, 0.0, 1.0] and g.policy_version == 3
    assert sum(g.advantages) == pytest.approx(0.0, abs=1e-6)
    bad = [Score(0.0, error="GraderError")] * 3 + [Score(1.0)]
    groups, stats = build_groups([(task, 0)], comps, bad, group_size=4, version=0)
    assert groups == [] and stats.dropped_groups == 1


def test_domain_scaling_gives_each_domain_unit_scale_and_keeps_small_gaps_small():
    def task(i: int, domain: str) -> Task:
        return Task(id=f"t{i}", domain=domain, split="train", difficulty=1, prompt=[],
                    reference="")

    rewards = {  # code: big gaps; math: one group with gaps of a hair, one with real gaps
        0: ("code/x-v1", [1.0, 0.0, 1.0, 0.0]), 1: ("code/x-v1", [0.8, 0.2, 0.2, 0.8]),
        2: ("math/y-v1", [0.10, 0.10, 0.10, 0.12]), 3: ("math/y-v1", [0.0, 0.3, 0.0, 0.3]),
    }
    picks = [(task(i, d), 0) for i, (d, _) in rewards.items()]
    comps = [Completion(task_id=f"t{i}", text="", sample_index=j, prompt_token_ids=[5],
                        token_ids=[7], logprobs=[-1.0]) for i in rewards for j in range(4)]
    scores = [Score(r) for _, rs in rewards.values() for r in rs]
    groups, _ = build_groups(picks, comps, scores, group_size=4, version=0, scale="domain")
    for domain in ("code/x-v1", "math/y-v1"):
        adv = torch.tensor([a for g in groups if g.task.domain == domain for a in g.advantages])
        pooled = (adv.pow(2).sum() / (len(adv) - 2)).sqrt()  # 2 groups per domain
        assert pooled == pytest.approx(1.0, abs=1e-3)  # unit scale in every domain
    small = torch.tensor(groups[2].advantages).abs().max()
    assert small < 0.15  # a gap of 0.02 stays small next to its domain's gaps of 0.3
    by_group, _ = build_groups(picks, comps, scores, group_size=4, version=0, scale="group")
    assert torch.tensor(by_group[2].advantages).abs().max() > 1.0  # per-group std blows it up
    for g in groups:
        assert sum(g.advantages) == pytest.approx(0.0, abs=1e-5)


def test_overlong_penalty_of_episodes_is_per_model_turn():
    """max_new_tokens limits each model turn: a multi-turn episode whose turns all stay
    short is not punished for its total length (DAPO's penalty is on the cut-off turn)."""
    from polyrl.train.groups import build_groups
    from polyrl.types import Episode, Score, Task, Turn

    task = Task(id="t", domain="tools/x", split="train", difficulty=1,
                prompt=[{"role": "user", "content": "q"}], reference="")

    def episode(n_turns: int, per_turn: int) -> Episode:
        turns = []
        for k in range(n_turns):
            turns.append(Turn("assistant", "a", [10] * per_turn, [-1.0] * per_turn, True))
            if k < n_turns - 1:
                turns.append(Turn("user", "o", [11] * 5, [], False))
        return Episode(task_id="t", turns=turns, prompt_token_ids=[1, 2, 3], terminated=True)

    eps = [episode(1, 20), episode(4, 20), episode(2, 28), episode(1, 32)]
    groups, _ = build_groups([(task, 0)], eps, [Score(reward=1.0)] * 4, group_size=4,
                             version=0, max_tokens=32, overlong_buffer_tokens=8)
    assert groups[0].rewards == pytest.approx([1.0, 1.0, 0.5, 0.0])


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_equal_partial_rewards_give_exact_zero_advantages(scale):
    # the float32 mean of seven 0.7s is an ulp off 0.7; divided by (0 + STD_EPS) that read
    # as an advantage of ~6e-4 on a group that carries no signal
    r = torch.tensor([[0.7] * 7, [0.1] * 7, [1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0]])
    adv = group_advantages(r, scale)
    assert torch.equal(adv[:2], torch.zeros(2, 7))
    assert adv[2].abs().min() > 0.1


def test_replayed_episode_without_logprobs_gets_no_importance_weight():
    """A model turn with no sampling logprobs (text-only server, scripted policy) must not
    read as log mu = 0: that weighed the replayed row by pi(token) instead of 1, as a
    single-turn completion without logprobs is."""
    from polyrl.train.groups import Group
    from polyrl.train.update import _importance_weights
    from polyrl.types import Episode, Turn

    task = Task(id="t", domain="d/x-v1", split="train", difficulty=1, prompt=[], reference="")

    def episode(reward):
        return Episode(task_id="t", prompt_token_ids=[1, 2], reward=reward, turns=[
            Turn("assistant", "x", [5, 6], [], True), Turn("user", "o", [7], [], False)])

    groups, _ = build_groups([(task, 0)], [episode(0.0), episode(1.0)],
                             [Score(reward=0.0), Score(reward=1.0)], group_size=2, version=0)
    g = Group.from_dict({**groups[0].to_dict(), "replayed": True})
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]])
    logp = torch.log(torch.tensor([[0.3, 0.5, 1.0], [0.3, 0.5, 1.0]])) * mask
    w = _importance_weights([(g, [0, 1])], logp, mask, is_clip=2.0)
    assert torch.equal(w, mask)
