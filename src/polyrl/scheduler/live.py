"""In-memory companion of a stored job: the callable, live generator and completion event."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from polyrl.scheduler.store import StoredJob
from polyrl.types import JobStatus


class LiveJob:
    """A job held by a running scheduler.

    Attributes:
        row: the ``StoredJob`` (mutated under the scheduler lock, written on each change).
        fn, args, kwargs: the call (``fn`` is None for a finished job read from the store).
        gen: live generator of a sliced job between slices (thread executor), else None.
        state, has_state: last state a sliced job yielded (re-creation via ``resume_state``).
        done: set once the final status is durable; ``value``: the result.
        enq_at: monotonic seconds it entered the ready queue; ``token``: dispatch counter
            (a late result with an old token is ignored); ``in_attempt``: an attempt is
            open (a sliced job between slices); ``hints``: retry adaptation;
            ``run_s``: seconds spent in slices.
    """

    __slots__ = ("row", "fn", "args", "kwargs", "gen", "state", "has_state", "done", "value",
                 "enq_at", "token", "in_attempt", "hints", "run_s", "cancelled", "started")

    def __init__(self, row: StoredJob, fn: Callable[..., Any] | None, args: tuple,
                 kwargs: dict[str, Any]) -> None:
        self.row = row
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        self.gen: Any = None
        self.state: Any = None
        self.has_state = False
        self.done = threading.Event()
        self.value: Any = None
        self.enq_at = 0.0
        self.token = 0
        self.in_attempt = False
        self.hints: dict[str, Any] = {}
        self.run_s = 0.0
        self.cancelled = False
        self.started = 0.0

    @property
    def status(self) -> JobStatus:
        """Current status as a ``JobStatus``."""
        return JobStatus(self.row.status)
