"""Per-kind job metrics: queue wait, run time, attempts, error classes (this process only)."""

from __future__ import annotations

import threading
from collections import Counter, defaultdict
from typing import Any


def percentile(values: list[float], q: float) -> float:
    """The ``q``-quantile (0..1) by linear interpolation; 0.0 for an empty list."""
    if not values:
        return 0.0
    xs = sorted(values)
    pos = q * (len(xs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


class KindMetrics:
    """Thread-safe collector; ``snapshot()`` returns the dict ``Scheduler.metrics()`` shows."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wait: dict[str, list[float]] = defaultdict(list)
        self._run: dict[str, list[float]] = defaultdict(list)
        self._attempts: dict[str, list[int]] = defaultdict(list)
        self._errors: dict[str, Counter[str]] = defaultdict(Counter)
        self._status: dict[str, Counter[str]] = defaultdict(Counter)

    def waited(self, kind: str, wait_s: float) -> None:
        """One dispatch waited ``wait_s`` seconds in the ready queue."""
        with self._lock:
            self._wait[kind].append(wait_s)

    def failed_attempt(self, kind: str, error_class: str) -> None:
        """One attempt (or slice) ended with an error of class ``error_class``."""
        with self._lock:
            self._errors[kind][error_class] += 1

    def finished(self, kind: str, status: str, run_s: float, attempts: int) -> None:
        """A job reached a final status after ``run_s`` seconds of slices."""
        with self._lock:
            self._run[kind].append(run_s)
            self._attempts[kind].append(attempts)
            self._status[kind][status] += 1

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """``{kind: {queue_wait_s: {p50, p95, max}, run_s: {...}, attempts: {mean, max,
        total}, errors: {class: count}, status: {status: count}}}``; times in seconds."""
        with self._lock:
            kinds = set(self._wait) | set(self._run) | set(self._errors)
            out: dict[str, dict[str, Any]] = {}
            for k in sorted(kinds):
                w, r, a = self._wait[k], self._run[k], self._attempts[k]
                out[k] = {
                    "queue_wait_s": {"p50": percentile(w, 0.5), "p95": percentile(w, 0.95),
                                     "max": max(w, default=0.0), "n": len(w)},
                    "run_s": {"p50": percentile(r, 0.5), "p95": percentile(r, 0.95),
                              "max": max(r, default=0.0), "n": len(r)},
                    "attempts": {"mean": sum(a) / len(a) if a else 0.0,
                                 "max": max(a, default=0), "total": sum(a)},
                    "errors": dict(self._errors[k]),
                    "status": dict(self._status[k]),
                }
            return out
