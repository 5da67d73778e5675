"""The ready queue: priority with aging, short jobs first among equals.

Effective priority of a queued job at time ``t``::

    priority + aging_per_s * (t - enqueued_at)

so a job waiting long enough overtakes any fixed higher priority (nothing
starves). Because every job ages at the same rate, the order between two queued
jobs never changes with ``t``; the heap key is the time-free
``priority - aging_per_s * enqueued_bucket``. ``enqueued_at`` is rounded down to
``quantum_s`` so jobs queued within the same quantum count as equals, and among
equals the job with the smaller (remaining) cost runs first, then FIFO.
A sliced job that yields is re-queued with a fresh ``enqueued_at`` and its remaining
cost, so short jobs never wait behind more than one slice.
"""

from __future__ import annotations

import heapq
import itertools
import math


class ReadyQueue:
    """A heap of job ids ordered by aged priority, then cost, then arrival.

    Args:
        aging_per_s: priority units gained per second of waiting (>= 0).
        quantum_s: arrival-time rounding, seconds (> 0).

    Not thread-safe: the scheduler calls it under its own lock.
    """

    def __init__(self, aging_per_s: float = 0.01, quantum_s: float = 1.0) -> None:
        if aging_per_s < 0 or quantum_s <= 0:
            raise ValueError("ReadyQueue: need aging_per_s >= 0 and quantum_s > 0")
        self.aging_per_s = aging_per_s
        self.quantum_s = quantum_s
        self._heap: list[tuple[float, float, int, str]] = []
        self._entry: dict[str, tuple[float, float, int, str]] = {}
        self._info: dict[str, tuple[float, float, float]] = {}  # id -> (priority, cost, enq)
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._entry)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._entry

    def _key(self, priority: float, enqueued_at: float) -> float:
        bucket = math.floor(enqueued_at / self.quantum_s) * self.quantum_s
        return -(priority - self.aging_per_s * bucket)

    def push(self, job_id: str, priority: float, cost: float, enqueued_at: float) -> None:
        """Queue ``job_id`` (replacing an existing entry). Times in seconds on any one
        clock (the scheduler uses ``time.monotonic()``)."""
        entry = (self._key(priority, enqueued_at), cost, next(self._seq), job_id)
        self._entry[job_id] = entry
        self._info[job_id] = (priority, cost, enqueued_at)
        heapq.heappush(self._heap, entry)
        if len(self._heap) > 2 * len(self._entry) + 1024:  # drop stale entries
            self._heap = list(self._entry.values())
            heapq.heapify(self._heap)

    def pop(self) -> str | None:
        """Remove and return the job id to run next, or None when empty."""
        while self._heap:
            entry = heapq.heappop(self._heap)
            if self._entry.get(entry[3]) is entry:
                del self._entry[entry[3]]
                del self._info[entry[3]]
                return entry[3]
        return None

    def remove(self, job_id: str) -> bool:
        """Drop ``job_id`` from the queue; True when it was queued."""
        self._info.pop(job_id, None)
        return self._entry.pop(job_id, None) is not None

    def set_priority(self, job_id: str, priority: float) -> bool:
        """Change a queued job's priority (its waiting time is kept); False if not queued."""
        if job_id not in self._entry:
            return False
        _, cost, enq = self._info[job_id]
        self.push(job_id, priority, cost, enq)
        return True

    def ids(self) -> list[str]:
        """Ids of queued jobs (any order)."""
        return list(self._entry)

    def effective_priority(self, job_id: str, now: float) -> float:
        """Aged priority of a queued job at time ``now`` (the clock given to ``push``)."""
        priority, _, enq = self._info[job_id]
        return priority + self.aging_per_s * (now - enq)
