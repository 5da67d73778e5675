"""Replay buffer: signal only, no duplicates, staleness cap, priorities, state round trip."""

from __future__ import annotations

import numpy as np

from polyrl.train.groups import Group
from polyrl.train.replay import ReplayBuffer
from polyrl.types import Task


def group(i: int, rewards, version: int = 0) -> Group:
    task = Task(id=f"t{i}", domain="d/x-v1", split="train", difficulty=1, prompt=[],
                reference="")
    mean = float(np.mean(rewards))
    return Group(task=task, arm=0, prompt_ids=[1, i], completions=[[i, j] for j in
                 range(len(rewards))], behaviour_logprobs=[[-1.0, -1.0]] * len(rewards),
                 rewards=list(rewards), advantages=[r - mean for r in rewards],
                 policy_version=version)


def test_only_new_groups_with_signal_enter():
    buf = ReplayBuffer(capacity=10, max_staleness=2)
    assert buf.add(group(0, [0.0, 1.0]))
    assert not buf.add(group(0, [0.0, 1.0]))  # duplicate
    assert not buf.add(group(1, [1.0, 1.0]))  # zero advantage
    replayed = buf.sample(1, 0, np.random.default_rng(0))[0]
    assert replayed.replayed and not buf.add(replayed)
    assert len(buf) == 1


def test_staleness_cap_and_capacity_eviction():
    buf = ReplayBuffer(capacity=2, max_staleness=2)
    buf.add(group(0, [0.0, 1.0], version=0))
    buf.add(group(1, [0.0, 0.0, 0.0, 1.0], version=1))  # p=0.25: lower priority
    assert buf.add(group(2, [1.0, 0.0], version=2))  # full: evicts the lowest priority
    assert sorted(g.task.id for g in buf.groups) == ["t0", "t2"]
    assert not buf.add(group(3, [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0], version=2))
    assert [g.task.id for g in buf.sample(5, version=3, rng=np.random.default_rng(0))] != []
    assert [g.task.id for g in buf.groups] == ["t2"]  # t0 is 3 versions old: evicted


def test_sampling_is_prioritised_by_p_one_minus_p():
    buf = ReplayBuffer(capacity=10, max_staleness=100)
    buf.add(group(0, [0.0, 1.0]))  # p(1-p) = 0.25
    buf.add(group(1, [0.0] * 9 + [1.0]))  # p(1-p) = 0.09
    rng = np.random.default_rng(0)
    hits = sum(buf.sample(1, 0, rng)[0].task.id == "t0" for _ in range(500))
    assert 0.66 < hits / 500 < 0.80  # 0.25 / 0.34 = 0.735


def test_state_round_trip():
    buf = ReplayBuffer(capacity=4, max_staleness=3)
    buf.add(group(0, [0.0, 1.0]))
    buf.add(group(5, [0.2, 0.9, 0.1], version=1))
    other = ReplayBuffer(capacity=4, max_staleness=3)
    other.load_state_dict(buf.state_dict())
    assert other.state_dict() == buf.state_dict()
    assert not other.add(group(0, [0.0, 1.0]))  # keys restored too


def test_stale_groups_never_keep_a_fresh_one_out():
    buf = ReplayBuffer(capacity=2, max_staleness=1)
    assert buf.add(group(0, [0.0, 1.0], version=0)) and buf.add(group(1, [1.0, 0.0], version=0))
    fresh = group(2, [0.0, 0.0, 0.0, 1.0], version=5)  # lower priority, but current
    assert buf.add(fresh)
    assert [g.task.id for g in buf.groups] == ["t2"]


class CountingGroup(Group):
    """A real group that counts how often its de-duplication key is computed."""

    hashed = 0

    @property
    def key(self) -> str:
        CountingGroup.hashed += 1
        return super().key


def test_add_and_sample_hash_only_new_and_evicted_groups():
    """Every add to a full buffer and every sample re-hashed all kept groups (each key
    hashes every token: 165 ms for 246 groups of 8 x 1024 tokens, per call)."""
    buf = ReplayBuffer(capacity=50, max_staleness=100)
    for i in range(60):
        g = group(i, [0.0, 1.0] if i % 2 else [0.0, 0.0, 1.0], version=i // 10)
        buf.add(CountingGroup(**{**g.__dict__}))
    CountingGroup.hashed = 0
    for i in range(60, 70):
        g = group(i, [0.0, 1.0], version=6)
        assert buf.add(CountingGroup(**{**g.__dict__}))
    buf.sample(4, 6, np.random.default_rng(0))
    assert CountingGroup.hashed <= 10 * 2  # was 10 * 51
    assert len(buf) == 50 and buf._keys == {g.key for g in buf.groups}
    buf.sample(50, 105, np.random.default_rng(0))  # versions <= 4 are stale now
    assert 10 <= len(buf) < 50 and min(g.policy_version for g in buf.groups) == 5
    assert buf._keys == {g.key for g in buf.groups}


def test_a_resume_with_a_smaller_capacity_keeps_the_best_groups():
    """8 saved groups into a buffer of capacity 4 (``replay.capacity`` lowered before a
    resume): they all stayed, and an add dropped only one, so the buffer never came back
    to its capacity. Now it keeps the 4 of highest priority, in their order."""
    big = ReplayBuffer(capacity=8, max_staleness=100)
    for i in range(8):  # priorities p(1-p): 0.25 for the even, 0.09 for the odd ones
        big.add(group(i, [0.0, 1.0] if i % 2 == 0 else [0.0] * 9 + [1.0]))
    small = ReplayBuffer(capacity=4, max_staleness=100)
    small.load_state_dict(big.state_dict())
    assert [g.task.id for g in small.groups] == ["t0", "t2", "t4", "t6"]
    assert not small.add(group(2, [0.0, 1.0]))  # the kept groups' keys are restored
    assert small.add(group(9, [1.0, 0.0]))
    assert len(small) == 4  # the buffer stays at its capacity (was 8 after this add)
