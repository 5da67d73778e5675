"""Scheduler: priorities with aging, sliced long jobs, classified retries, durable state.

    from polyrl.scheduler import Scheduler, SQLiteStore, RetryPolicy
    sched = Scheduler(store=SQLiteStore(run_dir / "state.sqlite"), workers=4)
    scores = sched.map(score_fn, completions, kind="score", keys=[...])

See ``core.py`` (API and durability rules), ``retry.py`` (error classes),
``queue.py`` (ordering), ``store.py`` (durability guarantee), ``executors.py``
(threads / processes / Ray and the watchdog).
"""

from polyrl.scheduler.core import JobFailedError, JobFailure, Scheduler
from polyrl.scheduler.executors import AttemptContext, attempt_context
from polyrl.scheduler.queue import ReadyQueue
from polyrl.scheduler.retry import ErrorKind, RetryBudget, RetryPolicy, classify_error
from polyrl.scheduler.store import (
    JobStore,
    MemoryStore,
    SQLiteStore,
    StoredJob,
    StoreError,
    StoreLockedError,
)

__all__ = [
    "AttemptContext",
    "ErrorKind",
    "JobFailedError",
    "JobFailure",
    "JobStore",
    "MemoryStore",
    "ReadyQueue",
    "RetryBudget",
    "RetryPolicy",
    "SQLiteStore",
    "Scheduler",
    "StoreError",
    "StoreLockedError",
    "StoredJob",
    "attempt_context",
    "classify_error",
]
