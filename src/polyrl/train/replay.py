"""A cross-domain replay buffer of past groups that carried learning signal.

Only groups with non-zero advantages enter. Sampling is prioritised by p(1-p) of
the group's mean reward p (a group half right, half wrong teaches most), after
prioritised experience replay (Schaul et al., arXiv 1511.05952). Groups older
than ``max_staleness`` policy versions are evicted; a group enters at most once
(keyed by task and completion tokens). The trainer mixes replayed groups into
the slots of fresh groups that carry no signal, weighting their tokens by a
clipped importance weight ``min(pi_current / pi_behaviour, is_clip)`` (truncated
importance sampling, as in IMPALA's V-trace, arXiv 1802.01561).

Memory: the buffer is bounded in groups (``capacity``) and, optionally, in bytes
(``max_mib``); it counts the bytes of what it holds (``nbytes``, see ``group_nbytes``).
A group is stored as read-only tuples, copied once when it enters; ``sample`` hands
out groups that share those rows (no copy of the tokens), so no caller can change
what the buffer keeps, and a caller changing its own group after ``add`` cannot either.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import sys
from typing import Any, NamedTuple

import numpy as np

from polyrl.train.groups import Group

MIB = 2**20
"""Bytes in a MiB (``replay.max_mib`` and the ``replay/mib`` metric)."""

_BLOCK = 16  # CPython's object allocator hands out 16-byte multiples (64-bit, >= 3.8)


def _alloc(nbytes: int) -> int:
    """``nbytes`` rounded up to the allocator's block: what an object really takes."""
    return -(-nbytes // _BLOCK) * _BLOCK


_INT_BYTES = _alloc(sys.getsizeof(2**20))  # one token id object: 28 B, held in 32
_FLOAT_BYTES = _alloc(sys.getsizeof(0.5))  # one float object: 24 B, held in 32
_EMPTY_TUPLE_BYTES = sys.getsizeof(())


class _Held(NamedTuple):
    """What the buffer knows of one stored group without recomputing it."""

    key: str  # Group.key (hashes every token: computed once)
    nbytes: int  # group_nbytes
    priority: float  # Group.priority


class ReplayBuffer:
    """Bounded, prioritised, staleness-capped, duplicate-free store of groups.

    Args:
        capacity: most groups kept; when full, the lowest-priority group is evicted.
        max_staleness: a group sampled at version v is dropped once the policy is at
            version > v + max_staleness.
        max_mib: most MiB (2**20 bytes, as ``nbytes`` counts them) kept, or None (the
            default) for a bound in groups only. Over it, lowest-priority groups are
            evicted first, as for ``capacity``; a group that would need a group of
            higher priority evicted (or that alone is larger) is not stored.

    Attributes:
        groups: the groups held (read-only copies: tuples for lists), oldest first.
        nbytes: bytes of the groups held (the sum of their ``group_nbytes``).

    Raises:
        ValueError: ``capacity`` < 1, or ``max_mib`` is given and not > 0.
    """

    def __init__(self, capacity: int, max_staleness: int, max_mib: float | None = None) -> None:
        if capacity < 1:
            raise ValueError(f"replay capacity must be >= 1, got {capacity}")
        if max_mib is not None and not max_mib > 0:
            raise ValueError(f"replay max_mib must be > 0 (MiB) or None, got {max_mib}")
        self.capacity = capacity
        self.max_staleness = max_staleness
        self.max_mib = max_mib
        self.groups: list[Group] = []  # read-only (tuples); aligned with _held
        self._held: list[_Held] = []
        self._keys: set[str] = set()
        self.nbytes = 0

    def __len__(self) -> int:
        return len(self.groups)

    @property
    def max_bytes(self) -> int | None:
        """``max_mib`` in bytes (None: no byte bound)."""
        return None if self.max_mib is None else int(self.max_mib * MIB)

    def add(self, group: Group) -> bool:
        """Store ``group`` if it carries signal and is new; returns whether it was stored.

        The buffer keeps a read-only copy (tuples, its own copy of the task), so later
        changes to ``group`` do not reach it. Groups too stale for
        ``group.policy_version`` (a fresh group carries the current version) are evicted
        first, so they never keep a fresh group out; then, while over ``capacity`` or
        ``max_mib``, the lowest-priority groups, none of higher priority than ``group``
        (else ``group`` is not stored and nothing more is evicted)."""
        if group.replayed or not any(abs(a) > 1e-8 for a in group.advantages):
            return False
        key = group.key
        if key in self._keys:
            return False
        kept = _read_only(group)
        held = _Held(key, group_nbytes(kept), kept.priority)
        if self._excess(held.nbytes) != (0, 0):
            self.evict_stale(group.policy_version)
        victims = self._victims(held)
        if victims is None:
            return False
        self._drop(victims)
        self.groups.append(kept)
        self._held.append(held)
        self._keys.add(key)
        self.nbytes += held.nbytes
        return True

    def _excess(self, extra_bytes: int) -> tuple[int, int]:
        """(groups, bytes) over the bounds if one more group of ``extra_bytes`` entered."""
        cap = self.max_bytes
        return (max(0, len(self.groups) + 1 - self.capacity),
                0 if cap is None else max(0, self.nbytes + extra_bytes - cap))

    def _victims(self, new: _Held) -> list[int] | None:
        """Indices to evict, lowest priority first (the older of equals first), so that
        ``new`` fits; None when it cannot without evicting a group of higher priority."""
        cap = self.max_bytes
        if cap is not None and new.nbytes > cap:
            return None
        groups, excess_bytes = self._excess(new.nbytes)
        if groups <= 0 and excess_bytes <= 0:
            return []
        victims: list[int] = []
        for i in sorted(range(len(self._held)), key=lambda i: self._held[i].priority):
            if groups <= 0 and excess_bytes <= 0:
                break
            if self._held[i].priority > new.priority:
                return None
            victims.append(i)
            groups -= 1
            excess_bytes -= self._held[i].nbytes
        return victims if groups <= 0 and excess_bytes <= 0 else None

    def _drop(self, indices: list[int]) -> None:
        """Remove the groups at ``indices``, keeping the others' order."""
        if not indices:
            return
        gone = set(indices)
        for i in gone:
            self._keys.discard(self._held[i].key)
            self.nbytes -= self._held[i].nbytes
        keep = [i for i in range(len(self.groups)) if i not in gone]
        self.groups = [self.groups[i] for i in keep]
        self._held = [self._held[i] for i in keep]

    def evict_stale(self, version: int) -> int:
        """Drop groups older than ``max_staleness`` versions; returns how many."""
        stale = [i for i, g in enumerate(self.groups)
                 if version - g.policy_version > self.max_staleness]
        self._drop(stale)
        return len(stale)

    def sample(self, n: int, version: int, rng: np.random.Generator) -> list[Group]:
        """Up to ``n`` distinct groups, drawn with probability proportional to priority.

        Stale groups are evicted first. Returned groups are new ``Group`` objects marked
        ``replayed=True`` with a copy of the task, sharing the buffer's read-only token,
        log-prob, mask, reward and advantage tuples (no copy of those: they cannot be
        changed through them).
        """
        self.evict_stale(version)
        n = min(n, len(self.groups))
        if n <= 0:
            return []
        p = np.array([h.priority for h in self._held])
        idx = rng.choice(len(self.groups), size=n, replace=False, p=p / p.sum())
        return [dataclasses.replace(self.groups[i], replayed=True,
                                    task=copy.deepcopy(self.groups[i].task)) for i in idx]

    def state_dict(self) -> dict:
        """JSON-safe state for bit-exact resume (token rows as lists)."""
        return {"groups": [_as_lists(g.to_dict()) for g in self.groups]}

    def load_state_dict(self, state: dict) -> None:
        """Restore ``state_dict()`` output. A state over ``capacity`` or ``max_mib`` (a run
        resumed with smaller bounds) keeps its highest-priority groups that fit, in their
        order (lowest priority evicted first, as ``add`` does): ``add`` only ever drops
        one, so the buffer stayed over its capacity for good."""
        groups = [_read_only(Group.from_dict(g)) for g in state["groups"]]
        held = [_Held(g.key, group_nbytes(g), g.priority) for g in groups]
        cap = self.max_bytes
        keep, total = [], 0
        for i in sorted(range(len(groups)), key=lambda i: -held[i].priority):
            if len(keep) == self.capacity or (cap is not None and total + held[i].nbytes > cap):
                break
            keep.append(i)
            total += held[i].nbytes
        keep.sort()
        self.groups = [groups[i] for i in keep]
        self._held = [held[i] for i in keep]
        self._keys = {h.key for h in self._held}
        self.nbytes = total


def group_nbytes(group: Group) -> int:
    """Bytes of the Python objects ``group`` holds, as ``ReplayBuffer`` counts them.

    Token rows are tuples of Python objects, not tensors, so this counts what CPython
    allocates for them, each object's ``sys.getsizeof`` rounded up to the allocator's
    16-byte blocks: every container (a tuple: 40 B + 8 B per item), 32 B per token id
    outside the small ints CPython shares (-5..256), 32 B per float (log-probs,
    rewards, advantages: each its own object, as ``tolist()`` makes them); plus the
    per-group overhead: the ``Group`` and its ``Task`` objects, their attribute dicts
    and the task's text (prompt, reference, metadata). About 88 B per completion token
    with its log-prob and mask; tracemalloc, which sees the sizes asked for (a float:
    24 B), reads 0-20% less (tests/train/test_replay.py).

    A function of the group's content only, not of how its objects were built (a dict's
    or list's spare room is not counted: after a resume, a group loaded from the
    checkpoint counts what it counted before, so a ``max_mib`` bound evicts alike).
    """
    n = _alloc(sys.getsizeof(group)) + _dict_nbytes(len(vars(group)))  # its fields below
    n += _content_nbytes(group.task)
    n += _ints_nbytes(group.prompt_ids)
    for field in (group.completions, group.loss_masks):
        n += _seq_nbytes(len(field)) + sum(_ints_nbytes(row) for row in field)
    n += _seq_nbytes(len(group.behaviour_logprobs)) + sum(
        _seq_nbytes(len(row)) + _FLOAT_BYTES * len(row) for row in group.behaviour_logprobs)
    for floats in (group.rewards, group.advantages):
        n += _seq_nbytes(len(floats)) + _FLOAT_BYTES * len(floats)
    return n + _seq_nbytes(len(group.finish_reasons))  # the strings: shared literals


def _seq_nbytes(n_items: int) -> int:
    """A tuple of ``n_items`` (the items not included)."""
    return _alloc(_EMPTY_TUPLE_BYTES + 8 * n_items)


def _ints_nbytes(row: Any) -> int:
    """A row of ints: the tuple and every int outside CPython's small-int cache."""
    return _seq_nbytes(len(row)) + _INT_BYTES * sum(1 for t in row if t > 256 or t < -5)


@functools.lru_cache(maxsize=64)
def _dict_nbytes(n_items: int) -> int:
    """A dict of ``n_items`` built by inserting them (the items not included)."""
    return _alloc(sys.getsizeof(dict.fromkeys(range(n_items))))


def _content_nbytes(obj: Any) -> int:
    """Allocated bytes of ``obj`` and, recursively, of what it holds, from its content
    (containers counted without spare room)."""
    if isinstance(obj, dict):
        return _dict_nbytes(len(obj)) + sum(
            _content_nbytes(k) + _content_nbytes(v) for k, v in obj.items())
    if isinstance(obj, list | tuple | set | frozenset):
        return _seq_nbytes(len(obj)) + sum(_content_nbytes(x) for x in obj)
    n = _alloc(sys.getsizeof(obj))
    if hasattr(obj, "__dict__") and not isinstance(obj, type):
        n += _content_nbytes(vars(obj))
    return n


def _read_only(group: Group) -> Group:
    """A copy of ``group`` whose token, log-prob, mask, reward, advantage and finish
    rows are tuples (the objects in them, ints, floats and strs, are immutable), with
    its own copy of the task."""
    return dataclasses.replace(
        group, task=copy.deepcopy(group.task), prompt_ids=tuple(group.prompt_ids),
        completions=tuple(tuple(r) for r in group.completions),
        behaviour_logprobs=tuple(tuple(r) for r in group.behaviour_logprobs),
        rewards=tuple(group.rewards), advantages=tuple(group.advantages),
        finish_reasons=tuple(group.finish_reasons),
        loss_masks=tuple(tuple(r) for r in group.loss_masks))


def _as_lists(d: dict) -> dict:
    """``Group.to_dict()`` of a read-only group with its tuples back as lists (the
    checkpoint format of every version)."""
    for k in ("prompt_ids", "rewards", "advantages", "finish_reasons"):
        d[k] = list(d[k])
    for k in ("completions", "behaviour_logprobs", "loss_masks"):
        d[k] = [list(r) for r in d[k]]
    return d
