"""The scheduler's moving parts: dispatcher threads, outcome handling, retries, watchdog.

Split from ``core.py`` (the public API) to keep each file small; ``DispatchMixin``
only works as a base of ``Scheduler`` and touches its attributes under its lock.
"""

from __future__ import annotations

import heapq
import math
import threading
import time
from typing import TYPE_CHECKING, Any

from polyrl.errors import JobTimeoutError
from polyrl.scheduler import codec
from polyrl.scheduler.executors import AttemptContext, SliceCall, SliceOutcome
from polyrl.scheduler.retry import ErrorKind, RemoteJobError, classify_error
from polyrl.scheduler.store import StoreError
from polyrl.types import JobStatus

if TYPE_CHECKING:
    from polyrl.scheduler.live import LiveJob

WATCHDOG_INTERVAL_S = 0.02


class DispatchMixin:
    """Dispatcher threads pull from the ready queue, run one slice, record the outcome."""

    _cv: threading.Condition
    _done_cv: threading.Condition
    _ready: Any
    _delayed: list[tuple[float, int, str]]
    _jobs: dict[str, LiveJob]
    _running: dict[str, tuple[int, SliceCall, float, str]]
    _retired: set[str]
    _threads: list[threading.Thread]
    _tls: threading.local
    _surplus: int

    def _spawn(self: Any) -> None:
        """Start one dispatcher thread (lock held or during __init__)."""
        name = f"w{self._nthreads}"
        self._nthreads += 1
        t = threading.Thread(target=self._dispatch_loop, args=(name,), name=f"polyrl-{name}",
                             daemon=True)
        self._threads.append(t)
        t.start()

    def _dispatch_loop(self: Any, name: str) -> None:
        self._tls.dispatcher = True  # result() from a job here keeps the capacity up
        try:
            self._dispatch(name)
        except StoreError:  # the store stopped; result()/join() raise its error
            with self._done_cv:
                self._done_cv.notify_all()

    def _dispatch(self: Any, name: str) -> None:
        while True:
            with self._cv:
                taken = self._take(name)
                if taken is None:
                    return
                live, call, token = taken
            t0 = time.perf_counter()
            try:
                out = self.executor.run(call)
            except Exception as exc:  # noqa: BLE001 - an executor bug must not kill the slot
                out = SliceOutcome("error", error=exc)
            elapsed = time.perf_counter() - t0
            with self._cv:
                cur = self._running.get(live.row.id)
                if cur is None or cur[0] != token:  # the watchdog gave up on this slice
                    if name in self._retired:
                        return
                    continue
                del self._running[live.row.id]
                live.run_s += elapsed
                self._handle(live, out, name)

    def _take(self: Any, name: str) -> tuple[LiveJob, SliceCall, int] | None:
        """Pop the next job and mark it running (lock held); None when this thread stops."""
        while True:
            if name in self._retired:
                return None
            if self._surplus > 0:  # a nested result() returned: drop its stand-in thread
                self._surplus -= 1
                return None
            self._release_due()
            job_id = self._ready.pop()
            if job_id is not None:
                break
            if self._closing:
                return None
            timeout = (max(self._delayed[0][0] - time.monotonic(), 0.001) if self._delayed
                       else None)
            self._cv.wait(timeout)
        live = self._jobs[job_id]
        row = live.row
        now, mono = time.time(), time.monotonic()
        if not live.in_attempt:
            row.attempts += 1
            live.in_attempt = True
            if row.attempts == 1:
                self.budget.record_first()
        row.status = JobStatus.RUNNING.value
        if not row.started_at:
            row.started_at = now
        live.token += 1
        ctx = AttemptContext(row.id, row.kind, row.attempts, dict(live.hints), name)
        gen = live.gen if self.executor.keeps_generators else None
        call = SliceCall(row.id, live.fn, live.args, live.kwargs, ctx, live.state,
                         live.has_state, gen)
        deadline_at = mono + row.deadline_s if row.deadline_s else math.inf
        self._running[row.id] = (live.token, call, deadline_at, name)
        self._metrics.waited(row.kind, mono - live.enq_at)
        self.store.update(row)
        return live, call, live.token

    def _handle(self: Any, live: LiveJob, out: SliceOutcome, name: str) -> None:
        """Record a slice's outcome (lock held)."""
        row = live.row
        if out.kind == "done":
            if self.store.durable:
                try:
                    row.result = codec.dumps(out.value, f"result of job {row.id}")
                    too_big = self.store.oversize(row)
                    if too_big:
                        raise codec.NotSerializableError(too_big)
                except codec.NotSerializableError as exc:
                    row.result = None
                    self._fail(live, exc, name, final=True)
                    return
            live.value = out.value
            self._finish(live, JobStatus.DONE)
        elif out.kind == "yield":
            live.gen, live.state, live.has_state = out.gen, out.value, True
            if self.store.durable:
                try:
                    row.state = codec.dumps(out.value, f"state of job {row.id}")
                    if self.store.oversize(row):
                        row.state = None
                except codec.NotSerializableError:
                    row.state = None
            row.status = JobStatus.QUEUED.value
            self.store.update(row)
            # Remaining cost: the estimate left, or (once exceeded) the time already run.
            self._push(live, remaining_cost=max(row.cost - live.run_s, live.run_s))
        else:
            assert out.error is not None
            self._fail(live, out.error, name)

    def _fail(self: Any, live: LiveJob, exc: BaseException, name: str,
              final: bool = False) -> None:
        """Classify a failed attempt: re-queue, retry after backoff, or fail (lock held)."""
        row = live.row
        kind = ErrorKind.FINAL if final else classify_error(exc)
        row.error_class = (exc.error_class if isinstance(exc, RemoteJobError)
                           else type(exc).__name__)
        row.error_message = str(exc)[:2000]
        self._metrics.failed_attempt(row.kind, row.error_class)
        live.gen = None
        if kind is ErrorKind.PREEMPTED:
            row.preemptions += 1
            if row.preemptions <= self.retry.max_preemptions:
                row.status = JobStatus.QUEUED.value
                self.store.update(row)
                self._push(live)
                return
            kind = ErrorKind.FINAL
        row.failures += 1
        live.in_attempt = False
        if row.failures < self.retry.attempts_allowed(kind):
            if self.budget.try_spend():
                live.hints = self.retry.adapt(row.failures, exc, name)
                delay_s = self.retry.backoff_s(row.failures, self._rng)
                row.status = JobStatus.RETRYING.value
                self.store.update(row)
                self._delay_seq += 1
                heapq.heappush(self._delayed, (time.monotonic() + delay_s, self._delay_seq,
                                               row.id))
                self._cv.notify()
                return
            row.error_message = f"retry budget exhausted; {row.error_message}"
        elif kind is ErrorKind.UNKNOWN:
            row.quarantined = 1
        self._finish(live, JobStatus.FAILED)

    def _finish(self: Any, live: LiveJob, status: JobStatus) -> None:
        """Final status: write it; mark the job done once the write is durable (lock held)."""
        row = live.row
        row.status = status.value
        row.finished_at = time.time()
        live.in_attempt = False
        live.gen = None
        self._metrics.finished(row.kind, row.status, live.run_s, row.attempts)

        def committed() -> None:
            live.done.set()
            with self._done_cv:
                self._unfinished -= 1
                self._done_cv.notify_all()

        self.store.update(row, on_commit=committed)

    def _release_due(self: Any) -> None:
        """Move retries whose backoff has passed into the ready queue (lock held)."""
        now = time.monotonic()
        while self._delayed and self._delayed[0][0] <= now:
            _, _, job_id = heapq.heappop(self._delayed)
            live = self._jobs[job_id]
            if live.status is not JobStatus.RETRYING:
                continue
            live.row.status = JobStatus.QUEUED.value
            self.store.update(live.row)
            self._push(live)

    def _watch(self: Any) -> None:
        """Watchdog: a slice past its deadline is killed (best effort), recorded as
        ``JobTimeoutError`` and its thread replaced; its late result is ignored."""
        while not self._closing:
            time.sleep(WATCHDOG_INTERVAL_S)
            kills: list[SliceCall] = []
            with self._cv:
                now = time.monotonic()  # deadlines: immune to wall-clock steps (NTP)
                for job_id, (_, call, deadline_at, name) in list(self._running.items()):
                    live = self._jobs[job_id]
                    limit_s = live.row.deadline_s or 0.0
                    if not limit_s:  # no deadline
                        continue
                    dispatched = deadline_at - limit_s
                    what = f"ran past its deadline of {limit_s} s"
                    if call.started is not None:  # the executor says when it began to run
                        deadline_at = call.started + limit_s
                    elif self.executor.reports_start:  # dispatched, not started yet
                        deadline_at = dispatched + self.executor.pending_limit_s(limit_s)
                        what = f"did not start within {deadline_at - dispatched:.0f} s"
                    if now <= deadline_at:
                        continue
                    del self._running[job_id]
                    live.run_s += now - dispatched
                    self._retired.add(name)
                    self._spawn()
                    kills.append(call)
                    try:
                        self._fail(live, JobTimeoutError(f"job {job_id} {what}"), name)
                    except StoreError:  # the store stopped; result()/join() raise its error
                        return
            for call in kills:
                self.executor.kill(call)
