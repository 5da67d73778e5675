"""The policy update: micro-batching, clipped importance weights of replayed groups."""

from __future__ import annotations

import math

import pytest
import torch

from polyrl.train.groups import Group
from polyrl.train.update import UpdateOptions, _importance_weights, micro_batches, policy_update
from polyrl.types import Task

from .conftest import tiny_model

TASK = Task(id="t", domain="d/x-v1", split="train", difficulty=1, prompt=[], reference="")


def group(n: int, replayed=False, mu=None) -> Group:
    comps = [[10 + i, 11 + i] for i in range(n)]
    return Group(task=TASK, arm=0, prompt_ids=[5, 6, 7], completions=comps,
                 behaviour_logprobs=mu or [[] for _ in comps], rewards=[0.0, 1.0] * (n // 2),
                 advantages=[-1.0, 1.0] * (n // 2), policy_version=0, replayed=replayed)


def test_micro_batches_split_groups_in_order():
    chunks = micro_batches([group(4), group(2)], 3)
    assert [[len(idx) for _, idx in c] for c in chunks] == [[3], [1, 2]]
    assert sum(len(idx) for c in chunks for _, idx in c) == 6


def test_replayed_rows_get_clipped_importance_weights():
    logp = torch.log(torch.tensor([[0.5, 0.5], [0.5, 0.5]]))
    mask = torch.ones(2, 2)
    mu = [[math.log(0.25), math.log(0.1)], [math.log(0.5), math.log(0.5)]]
    g = group(2, replayed=True, mu=mu)
    w = _importance_weights([(g, [0, 1])], logp, mask, is_clip=2.0)
    assert torch.allclose(w, torch.tensor([[2.0, 2.0], [1.0, 1.0]]))  # 0.5/0.25 = 2; 5 -> cap
    fresh = _importance_weights([(group(2, mu=mu), [0, 1])], logp, mask, is_clip=2.0)
    assert torch.equal(fresh, mask)  # on-policy rows: weight 1


def test_update_with_no_groups_is_a_no_op():
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    before = [p.clone() for p in model.parameters()]
    stats = policy_update(model, opt, [], UpdateOptions())
    assert stats.sequences == 0
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_num_iterations_reuses_the_batch_under_the_clip():
    """mu = 3: three optimizer steps on one batch; the later passes take the ratio
    against the first pass's log-probs, so with a large step the clip engages."""
    groups = [group(4), group(4)]
    one, three = tiny_model(), tiny_model()
    opt1 = torch.optim.Adam(one.parameters(), lr=0.05)
    opt3 = torch.optim.Adam(three.parameters(), lr=0.05)
    s1 = policy_update(one, opt1, groups, UpdateOptions(num_iterations=1))
    s3 = policy_update(three, opt3, groups, UpdateOptions(num_iterations=3))
    step_of = lambda opt: int(next(iter(opt.state.values()))["step"])  # noqa: E731
    assert step_of(opt1) == 1 and step_of(opt3) == 3
    assert s1.clip_fraction == 0.0 and s3.clip_fraction > 0.0
    # the on-pass figures are those of the first pass: identical to mu = 1
    assert math.isclose(s1.loss, s3.loss, rel_tol=1e-6)
    assert s3.sequences == s1.sequences == 8
    with torch.no_grad():
        moved1 = sum(float((a - b).abs().sum()) for a, b in
                     zip(one.parameters(), tiny_model().parameters(), strict=True))
        moved3 = sum(float((a - b).abs().sum()) for a, b in
                     zip(three.parameters(), tiny_model().parameters(), strict=True))
    assert moved3 > moved1


def repeating_groups() -> list[Group]:
    """Two groups whose completions repeat (equal tokens -> equal reward, advantage)."""
    a = Group(task=TASK, arm=0, prompt_ids=[5, 6, 7],
              completions=[[10, 11], [12], [10, 11], [13, 14, 15], [12], [10, 11]],
              behaviour_logprobs=[[] for _ in range(6)], rewards=[1, 0, 1, 0.5, 0, 1],
              advantages=[0.9, -1.1, 0.9, 0.1, -1.1, 0.9], policy_version=0)
    b = Group(task=TASK, arm=0, prompt_ids=[8, 9],
              completions=[[20], [20], [21, 22], [20]], behaviour_logprobs=[[] for _ in range(4)],
              rewards=[0, 0, 1, 0], advantages=[-0.5, -0.5, 1.5, -0.5], policy_version=0)
    return [a, b]


def test_merging_repeated_rows_gives_the_unmerged_gradient():
    from polyrl.train.losses import LOSS_AGGREGATIONS
    from polyrl.train.update import chunk_logprobs, distinct_rows

    groups = repeating_groups()
    assert distinct_rows(groups[0]) == ([0, 1, 3], [3, 2, 1])
    assert distinct_rows(groups[1]) == ([0, 2], [3, 1])
    ref = tiny_model(seed=1)
    for agg in LOSS_AGGREGATIONS:
        figures, grads = [], []
        for merge in (False, True):
            model = tiny_model()
            opts = UpdateOptions(loss_agg=agg, merge_repeats=merge, kl_coef=0.1,
                                 micro_batch_size=3, max_tokens=4)
            ref_fn = lambda chunk, o=opts: chunk_logprobs(ref, chunk, o, False).logprobs  # noqa: E731
            opt = torch.optim.SGD(model.parameters(), lr=1.0)
            stats = policy_update(model, opt, groups, opts, ref_fn, step_optimizer=False)
            figures.append(stats)
            grads.append(torch.cat([p.grad.flatten() for p in model.parameters()
                                    if p.grad is not None]))
        full, merged = figures
        assert full.distinct_sequences == 10 and merged.distinct_sequences == 5, agg
        assert full.sequences == merged.sequences == 10, agg
        assert full.tokens == merged.tokens, agg  # trained tokens: repeats counted
        assert merged.micro_batches < full.micro_batches, agg
        assert torch.allclose(grads[0], grads[1], atol=1e-6, rtol=1e-4), agg
        for name in ("loss", "policy_loss", "kl", "entropy", "grad_norm"):
            assert getattr(merged, name) == pytest.approx(getattr(full, name), rel=1e-4,
                                                          abs=1e-7), (agg, name)


def test_merged_figures_count_the_first_pass_with_several_iterations():
    model = tiny_model()
    stats = policy_update(model, torch.optim.SGD(model.parameters(), lr=0.0),
                          repeating_groups(), UpdateOptions(num_iterations=3), None,
                          step_optimizer=False)
    assert (stats.sequences, stats.distinct_sequences) == (10, 5)
