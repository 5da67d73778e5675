"""A cross-domain replay buffer of past groups that carried learning signal.

Only groups with non-zero advantages enter. Sampling is prioritised by p(1-p) of
the group's mean reward p (a group half right, half wrong teaches most), after
prioritised experience replay (Schaul et al., arXiv 1511.05952). Groups older
than ``max_staleness`` policy versions are evicted; a group enters at most once
(keyed by task and completion tokens). The trainer mixes replayed groups into
the slots of fresh groups that carry no signal, weighting their tokens by a
clipped importance weight ``min(pi_current / pi_behaviour, is_clip)`` (truncated
importance sampling, as in IMPALA's V-trace, arXiv 1802.01561).
"""

from __future__ import annotations

import numpy as np

from polyrl.train.groups import Group


class ReplayBuffer:
    """Bounded, prioritised, staleness-capped, duplicate-free store of groups.

    Args:
        capacity: most groups kept; when full, the lowest-priority group is evicted.
        max_staleness: a group sampled at version v is dropped once the policy is at
            version > v + max_staleness.
    """

    def __init__(self, capacity: int, max_staleness: int) -> None:
        if capacity < 1:
            raise ValueError(f"replay capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.max_staleness = max_staleness
        self.groups: list[Group] = []
        self._keys: set[str] = set()

    def __len__(self) -> int:
        return len(self.groups)

    def add(self, group: Group) -> bool:
        """Store ``group`` if it carries signal and is new; returns whether it was stored.

        Groups too stale for ``group.policy_version`` (a fresh group carries the current
        version) are evicted first, so they never keep a fresh group out."""
        if group.replayed or not any(abs(a) > 1e-8 for a in group.advantages):
            return False
        key = group.key
        if key in self._keys:
            return False
        if len(self.groups) >= self.capacity:
            self.evict_stale(group.policy_version)
        if len(self.groups) >= self.capacity:
            worst = min(range(len(self.groups)), key=lambda i: self.groups[i].priority)
            if self.groups[worst].priority > group.priority:
                return False
            self._keys.discard(self.groups.pop(worst).key)
        self.groups.append(group)
        self._keys.add(key)
        return True

    def evict_stale(self, version: int) -> int:
        """Drop groups older than ``max_staleness`` versions; returns how many."""
        keep = [g for g in self.groups if version - g.policy_version <= self.max_staleness]
        if len(keep) == len(self.groups):
            return 0
        for g in self.groups:  # hash only the dropped (a key hashes every token)
            if version - g.policy_version > self.max_staleness:
                self._keys.discard(g.key)
        dropped = len(self.groups) - len(keep)
        self.groups = keep
        return dropped

    def sample(self, n: int, version: int, rng: np.random.Generator) -> list[Group]:
        """Up to ``n`` distinct groups, drawn with probability proportional to priority.

        Stale groups are evicted first. Returned groups are copies marked
        ``replayed=True``; the buffer keeps its own.
        """
        self.evict_stale(version)
        n = min(n, len(self.groups))
        if n <= 0:
            return []
        p = np.array([g.priority for g in self.groups])
        idx = rng.choice(len(self.groups), size=n, replace=False, p=p / p.sum())
        return [Group.from_dict({**self.groups[i].to_dict(), "replayed": True}) for i in idx]

    def state_dict(self) -> dict:
        """JSON-safe state for bit-exact resume."""
        return {"groups": [g.to_dict() for g in self.groups]}

    def load_state_dict(self, state: dict) -> None:
        """Restore ``state_dict()`` output. A state of more groups than ``capacity`` (a
        run resumed with a smaller ``replay.capacity``) keeps the ``capacity`` of highest
        priority, in their order: ``add`` only ever drops one, so the buffer stayed over
        its capacity for good."""
        groups = [Group.from_dict(g) for g in state["groups"]]
        if len(groups) > self.capacity:
            best = sorted(range(len(groups)), key=lambda i: -groups[i].priority)
            groups = [groups[i] for i in sorted(best[:self.capacity])]
        self.groups = groups
        self._keys = {g.key for g in self.groups}
