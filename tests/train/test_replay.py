"""Replay buffer: signal only, no duplicates, staleness cap, priorities, state round trip."""

from __future__ import annotations

import numpy as np
import pytest
import torch

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


def realistic(i: int, rewards, gen, version: int = 0, tokens: int = 300) -> Group:
    """A group as ``build_groups`` makes it from a policy's tensors (``tolist()``)."""
    g = len(rewards)
    task = Task(id=f"r{i}", domain="d/x-v1", split="train", difficulty=1,
                prompt=[{"role": "user", "content": "q" * 400}], reference="42",
                metadata={"answer": "42"})
    mean = float(np.mean(rewards))
    return Group(task=task, arm=0, prompt_ids=torch.randint(300, 32_000, (100,),
                                                            generator=gen).tolist(),
                 completions=[torch.randint(0, 32_000, (tokens,), generator=gen).tolist()
                              for _ in range(g)],
                 behaviour_logprobs=[(-torch.rand(tokens, generator=gen)).tolist()
                                     for _ in range(g)],
                 rewards=list(rewards), advantages=[r - mean for r in rewards],
                 policy_version=version, finish_reasons=["stop"] * g,
                 loss_masks=[[1] * tokens for _ in range(g)])


def test_sample_copies_no_tokens_and_nobody_can_change_what_the_buffer_keeps():
    """``sample`` copied every drawn group through ``to_dict``/``from_dict`` (31 ms a
    call of 4 groups of 8 x 300 tokens, benchmarks/replay_sample.py), while ``add``
    kept the caller's own lists. Now ``add`` keeps read-only tuples and ``sample``
    shares them."""
    gen = torch.Generator().manual_seed(0)
    buf = ReplayBuffer(capacity=4, max_staleness=10)
    mine = realistic(0, [0.0, 1.0], gen)
    first = list(mine.completions[0])
    assert buf.add(mine)
    mine.completions[0].append(7)  # the adder changes its own group afterwards
    mine.rewards[0] = 0.5
    mine.task.metadata["answer"] = "changed"
    kept = buf.groups[0]
    assert list(kept.completions[0]) == first and kept.rewards[0] == 0.0
    assert kept.task.metadata["answer"] == "42"  # the task came from the same dict: copied

    got = buf.sample(1, 0, np.random.default_rng(0))[0]
    assert got.replayed and not kept.replayed
    assert got.completions[0] is kept.completions[0]  # shared, not copied
    assert got.behaviour_logprobs is kept.behaviour_logprobs
    for row in (got.prompt_ids, got.completions[0], got.behaviour_logprobs[0],
                got.loss_masks[0], got.rewards, got.advantages):
        with pytest.raises(TypeError):
            row[0] = 1  # tuples
    with pytest.raises(AttributeError):
        got.completions[0].append(1)
    got.rewards = [1.0, 1.0]  # its own Group object: rebinding reaches nothing
    got.task.metadata["answer"] = "mine"  # its own copy of the task
    again = buf.sample(1, 0, np.random.default_rng(0))[0]
    assert again.rewards == (0.0, 1.0) and again.task.metadata["answer"] == "42"
    state = buf.state_dict()["groups"][0]  # the checkpoint format stays plain lists
    assert type(state["completions"]) is list and type(state["completions"][0]) is list
    assert state["completions"][0] == first


def test_nbytes_counts_the_heap_the_groups_hold():
    """The buffer was bounded in groups only; it now counts its bytes. Checked against
    tracemalloc (which sees the sizes asked for; the count rounds each object up to
    the allocator's 16-byte blocks, so it reads 0-20% more)."""
    import gc
    import tracemalloc

    from polyrl.train.replay import group_nbytes

    gen = torch.Generator().manual_seed(1)
    buf = ReplayBuffer(capacity=100, max_staleness=1)
    assert buf.nbytes == 0
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for i in range(12):
            assert buf.add(realistic(i, [0.0, 1.0, 1.0, 0.0] * 2, gen, version=i % 3))
        gc.collect()
        traced = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert traced <= buf.nbytes <= 1.2 * traced, (buf.nbytes, traced)
    assert 8 * 300 * 80 * 12 < buf.nbytes < 8 * 300 * 100 * 12  # ~88 B per token
    assert buf.nbytes == sum(group_nbytes(g) for g in buf.groups)
    buf.evict_stale(2)  # drops version 0
    assert len(buf) == 8 and buf.nbytes == sum(group_nbytes(g) for g in buf.groups)
    other = ReplayBuffer(capacity=100, max_staleness=1)
    other.load_state_dict(buf.state_dict())
    assert other.nbytes == buf.nbytes


def test_max_mib_evicts_lowest_priority_first_as_the_group_cap_does():
    from polyrl.train.replay import MIB

    gen = torch.Generator().manual_seed(2)
    h0, h1, h2 = (realistic(i, [0.0, 1.0], gen) for i in range(3))  # p(1-p) = 0.25
    probe = ReplayBuffer(capacity=1, max_staleness=10)
    assert probe.add(h0)
    size = probe.nbytes  # one group of 2 x 300 tokens
    buf = ReplayBuffer(capacity=100, max_staleness=10, max_mib=2.5 * size / MIB)
    assert buf.add(h0) and buf.add(realistic(3, [0.0, 0.1], gen))  # 0.0475
    assert buf.add(h1)  # 3 groups' bytes > 2.5: the lowest priority goes
    assert [g.task.id for g in buf.groups] == ["r0", "r1"]
    assert not buf.add(realistic(4, [0.0, 0.2], gen))  # 0.09 would push out a 0.25: refused
    assert not buf.add(realistic(5, [0.0, 1.0], gen, tokens=1000))  # alone over the cap
    assert [g.task.id for g in buf.groups] == ["r0", "r1"]  # refusals evict nothing
    assert buf.add(h2) and [g.task.id for g in buf.groups] == ["r1", "r2"]  # older of equals
    smaller = ReplayBuffer(capacity=100, max_staleness=10, max_mib=1.5 * size / MIB)
    smaller.load_state_dict(buf.state_dict())  # resumed under a lower cap
    assert [g.task.id for g in smaller.groups] == ["r1"]
    assert smaller.nbytes <= smaller.max_bytes
    assert buf.add(realistic(6, [1.0, 0.0], gen, tokens=600))  # ~2 groups' bytes: both go
    assert [g.task.id for g in buf.groups] == ["r6"] and buf.nbytes <= buf.max_bytes


@pytest.mark.parametrize("bad", [0, -1.0])
def test_a_non_positive_max_mib_is_refused_by_name(bad):
    with pytest.raises(ValueError, match=r"max_mib must be > 0"):
        ReplayBuffer(capacity=4, max_staleness=1, max_mib=bad)
