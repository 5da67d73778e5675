"""The policy update: micro-batching, clipped importance weights of replayed groups."""

from __future__ import annotations

import math

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
