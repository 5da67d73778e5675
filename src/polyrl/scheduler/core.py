"""The Scheduler: many jobs of very different lengths, finished in a good order, none lost.

Life of a job: ``queued -> running -> done``; a failed attempt goes to ``retrying``
(transient/unknown error, after a backoff) or ends ``failed`` (task error, retries or
budget used up, quarantine); a preempted attempt goes back to ``queued``; a sliced job
goes ``running -> queued`` after each ``yield``. Every change is written to the store.

Durable jobs (re-created by ``resume()`` after a SIGKILL) need a store with
``durable=True`` (``SQLiteStore``), a top-level importable function and JSON-safe
arguments (see ``polyrl.scheduler.codec``). Other jobs (closures, bound methods,
tensors as arguments) are allowed and recorded too, but cannot be re-created:
``resume()`` marks them ``cancelled`` (``NotResumableError``) and re-submitting them
with the same ``key`` runs them again. Pass ``require_durable=True`` to refuse them.
Results must be JSON-safe when the store is durable (else the job fails, final), and
fit in one SQLite row (``JobStore.oversize``; else the job fails, final).

Delivery after a kill: a job that ended (done/failed) is never run again and its
result is recorded once; a job in flight at the kill runs again after ``resume()``
(at least once: make side effects idempotent; a sliced job restarts from its last
stored state). A job that kills the whole process (``os.abort``, a segfault in C
code, the OOM killer) on the thread executor is run again by every ``resume()``; run
such jobs on ``executor="process"``, where its death is a ``WorkerLostError`` retried
at most ``RetryPolicy.max_attempts`` times.

Sliced jobs (long multi-turn episodes): make the job a generator function. Each
``yield state`` ends a slice; the job goes back to the ready queue with its state
(persisted as JSON when possible) and its remaining cost, so short jobs run between
slices. The function must accept a ``resume_state=`` keyword: it is re-created as
``fn(*args, resume_state=state, **kwargs)`` after a crash, after a failed attempt, and
at every slice on the process and Ray executors (threads keep the live generator).
Deadlines (``deadline_s``) apply per slice; a slice past it is a ``JobTimeoutError``.
Deadlines, backoff and queue ages run on the monotonic clock (a wall-clock step by NTP
or an admin neither kills running slices nor stalls retries); the stored
``created_at``/``started_at``/``finished_at`` are UNIX seconds.

A job may use its own scheduler (``submit``/``map``/``result`` from inside a job on the
thread executor): while it waits, an extra dispatcher thread keeps the capacity, so
nested fan-out cannot deadlock. ``join()`` from inside a job would wait for itself and
raises ``RuntimeError``, and so does any use of the scheduler from a job running in a
forked worker (``executor="process"``), which has no dispatcher threads.

If the store stops accepting writes (``StoreError``: disk full, read-only file), every
``result``/``join``/``map`` raises that error instead of waiting; jobs already finished
stay in the store and a new process ``resume()``s the rest.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from polyrl.errors import PolyrlError
from polyrl.scheduler import codec
from polyrl.scheduler.dispatch import DispatchMixin
from polyrl.scheduler.executors import Executor, SliceCall, make_executor
from polyrl.scheduler.live import LiveJob
from polyrl.scheduler.metrics import KindMetrics
from polyrl.scheduler.queue import ReadyQueue
from polyrl.scheduler.retry import RetryBudget, RetryPolicy
from polyrl.scheduler.store import FINISHED, JobStore, MemoryStore, StoredJob
from polyrl.types import Job, JobStatus


@dataclass
class JobFailure:
    """A job that failed for good (what ``map(..., on_failure="return")`` puts in its slot)."""

    job_id: str
    error_class: str
    error_message: str
    attempts: int
    quarantined: bool
    status: str = JobStatus.FAILED.value


class JobFailedError(PolyrlError):
    """Raised by ``result``/``map`` for a job that ended ``failed`` or ``cancelled``.

    Attributes:
        failure: the (first) ``JobFailure``; ``failures``: all of them (``map``).
    """

    def __init__(self, failures: list[JobFailure]) -> None:
        self.failures = failures
        self.failure = failures[0]
        f = self.failure
        more = f" (+{len(failures) - 1} more)" if len(failures) > 1 else ""
        super().__init__(f"job {f.job_id} {f.status}: {f.error_class}: {f.error_message}"
                         f" after {f.attempts} attempt(s){more}")


class Scheduler(DispatchMixin):
    """Runs jobs by aged priority with classified retries, slicing and a watchdog.

    Args:
        store: ``MemoryStore()`` (default) or ``SQLiteStore(run_dir / "state.sqlite")``.
        executor: ``"local"`` (threads, default), ``"process"`` (forked child per slice,
            killable) or ``"ray"`` (``ray.init`` is called with ``workers`` CPUs if needed).
        workers: concurrent slices (>= 1).
        retry: ``RetryPolicy`` (limits, backoff, retry budget).
        aging_per_s: priority gained per second queued (nothing starves).
        quantum_s: arrival times within this many seconds count as equal (then short first).
        default_deadline_s: per-slice deadline when ``submit`` gives none (seconds).
        require_durable: refuse jobs ``resume()`` could not re-create.
        seed: seed of the backoff jitter (tests).
    """

    def __init__(self, store: JobStore | None = None, executor: str | Executor = "local",
                 workers: int = 4, retry: RetryPolicy | None = None, aging_per_s: float = 0.01,
                 quantum_s: float = 1.0, default_deadline_s: float = 3600.0,
                 require_durable: bool = False, seed: int | None = None) -> None:
        import random

        self.store = store if store is not None else MemoryStore()
        self.retry = retry or RetryPolicy()
        self.budget = RetryBudget(self.retry.budget_ratio, self.retry.budget_floor)
        self.executor = make_executor(executor, workers)
        self.default_deadline_s = default_deadline_s
        self.require_durable = require_durable
        self._rng = random.Random(seed)
        self._metrics = KindMetrics()
        self._lock = threading.RLock()
        self._cv = threading.Condition(self._lock)  # dispatcher threads wait here
        self._done_cv = threading.Condition(self._lock)  # join() waits here
        self._submit_lock = threading.Lock()
        self._ready = ReadyQueue(aging_per_s, quantum_s)
        self._delayed: list[tuple[float, int, str]] = []
        self._delay_seq = 0
        self._jobs: dict[str, LiveJob] = {}
        self._by_key: dict[str, str] = {}
        self._running: dict[str, tuple[int, SliceCall, float, str]] = {}
        self._retired: set[str] = set()
        self._unfinished = 0
        self._closing = False
        self._threads: list[threading.Thread] = []
        self._nthreads = 0
        self._tls = threading.local()  # .dispatcher: this thread is one of ours
        self._surplus = 0  # stand-in dispatchers to stop (see _keep_capacity)
        self._pid = os.getpid()
        for _ in range(self.executor.slots):
            self._spawn()
        self._watchdog = threading.Thread(target=self._watch, name="polyrl-watchdog", daemon=True)
        self._watchdog.start()

    # -- submitting ------------------------------------------------------------------------
    def submit(self, fn: Callable[..., Any], *args: Any, kind: str = "job",
               priority: float = 0.0, cost: float = 1.0, key: str | None = None,
               deadline_s: float | None = None, **kwargs: Any) -> str:
        """Queue ``fn(*args, **kwargs)``; returns the job id once the job is durable.

        ``key`` is an idempotency key: a key whose job finished (done or failed) returns
        that job's id and stored result without running anything; a key whose job is
        queued/running returns the same id. ``cost`` is the estimated run time (seconds).
        ``deadline_s`` bounds each attempt (each slice of a sliced job).
        """
        return self._submit_many(fn, [(args, kwargs, key)], kind, priority, cost, deadline_s)[0]

    def map(self, fn: Callable[..., Any], items: Iterable[Any], kind: str = "job",
            priority: float = 0.0, keys: list[str] | None = None, cost: float = 1.0,
            deadline_s: float | None = None, on_failure: str = "raise",
            timeout: float | None = None) -> list[Any]:
        """Run ``fn(item)`` for every item; block; return results in input order.

        A job that failed for good: with ``on_failure="raise"`` (default) a
        ``JobFailedError`` listing every failure is raised after all jobs ended; with
        ``on_failure="return"`` its slot holds a ``JobFailure``.
        """
        if on_failure not in ("raise", "return"):
            raise ValueError(f"map: on_failure must be 'raise' or 'return', got {on_failure!r}")
        ids = self.submit_batch(fn, items, kind, priority, keys, cost, deadline_s)
        out, failures = [], []
        with self._keep_capacity():
            for job_id in ids:
                try:
                    out.append(self.result(job_id, timeout=timeout))
                except JobFailedError as exc:
                    failures.append(exc.failure)
                    out.append(exc.failure)
        self.release(ids)  # the caller has the results; a long run must not hold them all
        if failures and on_failure == "raise":
            raise JobFailedError(failures)
        return out

    def submit_batch(self, fn: Callable[..., Any], items: Iterable[Any], kind: str = "job",
                     priority: float = 0.0, keys: list[str] | None = None, cost: float = 1.0,
                     deadline_s: float | None = None) -> list[str]:
        """Queue ``fn(item)`` for every item in one durable write; return ids in input order.

        The non-blocking half of ``map``; ``keys`` as in ``submit`` (one per item).
        """
        items = list(items)
        if keys is not None and len(keys) != len(items):
            raise ValueError(f"submit_batch: {len(keys)} keys for {len(items)} items")
        specs = [((it,), {}, keys[i] if keys else None) for i, it in enumerate(items)]
        return self._submit_many(fn, specs, kind, priority, cost, deadline_s)

    def _submit_many(self, fn: Callable[..., Any], specs: list[tuple[tuple, dict, str | None]],
                     kind: str, priority: float, cost: float,
                     deadline_s: float | None) -> list[str]:
        self._check_process("submit")
        durable = self.store.durable
        path = codec.fn_path(fn) if durable else None
        if durable and path is None and self.require_durable:
            raise ValueError(f"submit: {fn!r} is not importable by 'module:qualname'; durable "
                             "jobs need a top-level function (require_durable=True)")
        deadline = self.default_deadline_s if deadline_s is None else deadline_s
        ids: list[str] = []
        new_rows: list[StoredJob] = []
        new_live: list[LiveJob] = []
        with self._submit_lock:
            batch_keys: dict[str, str] = {}
            for args, kwargs, key in specs:
                known = batch_keys.get(key) if key is not None else None
                known = known or self._known_key(key)
                if known is not None:
                    ids.append(known)
                    continue
                old = self.store.get_by_key(key) if key is not None else None
                row = StoredJob(id=old.id if old else uuid.uuid4().hex[:16], kind=kind,
                                priority=priority, cost=cost, key=key, deadline_s=deadline)
                if old is not None:
                    row.attempts, row.failures = old.attempts, old.failures
                if durable:
                    row.fn = path
                    try:
                        row.args = codec.dumps(list(args), "args")
                        row.kwargs = codec.dumps(kwargs, "kwargs")
                        too_big = self.store.oversize(row)
                        if too_big:
                            raise codec.NotSerializableError(too_big)
                    except codec.NotSerializableError:
                        if self.require_durable:
                            raise
                        row.args = row.kwargs = None
                new_rows.append(row)
                new_live.append(LiveJob(row, fn, tuple(args), dict(kwargs)))
                ids.append(row.id)
                if key is not None:
                    batch_keys[key] = row.id
            if new_rows:
                self.store.insert(new_rows)
            with self._cv:
                for live in new_live:
                    self._add_live(live)
        return ids

    def _known_key(self, key: str | None) -> str | None:
        """Id of the job with ``key`` when it is live here or finished in the store."""
        if key is None:
            return None
        with self._lock:
            job_id = self._by_key.get(key)
            if job_id is not None and self._jobs[job_id].status is not JobStatus.CANCELLED:
                return job_id
        old = self.store.get_by_key(key)
        if old is None or JobStatus(old.status) not in (JobStatus.DONE, JobStatus.FAILED):
            return None
        live = LiveJob(old, None, (), {})
        live.value = codec.loads(old.result) if old.status == JobStatus.DONE.value else None
        live.done.set()
        with self._lock:
            self._jobs[old.id] = live
            self._by_key[key] = old.id
        return old.id

    def _add_live(self, live: LiveJob) -> None:
        """Register and queue a new job (lock held)."""
        self._jobs[live.row.id] = live
        if live.row.key is not None:
            self._by_key[live.row.key] = live.row.id
        self._unfinished += 1
        self._push(live)

    def _push(self, live: LiveJob, remaining_cost: float | None = None) -> None:
        live.enq_at = time.monotonic()
        cost = live.row.cost if remaining_cost is None else remaining_cost
        self._ready.push(live.row.id, live.row.priority, cost, live.enq_at)
        self._cv.notify()

    # -- resume after a crash ----------------------------------------------------------------
    def resume(self) -> list[str]:
        """Re-queue every unfinished job of the store that this scheduler does not hold.

        Returns the re-queued ids. Finished jobs are never touched (their results stay
        in the store; ``result(id)`` reads them). Jobs without a re-creatable function
        or arguments are marked ``cancelled`` with error class ``NotResumableError``.
        """
        requeued: list[str] = []
        with self._submit_lock:
            for row in self.store.unfinished():
                if row.id in self._jobs:
                    continue
                try:
                    if row.fn is None or row.args is None:
                        raise LookupError("function or arguments were not recorded")
                    fn = codec.load_fn(row.fn)
                    args, kwargs = codec.loads(row.args), codec.loads(row.kwargs) or {}
                except (LookupError, ImportError, AttributeError, ValueError) as exc:
                    row.status = JobStatus.CANCELLED.value
                    row.error_class = "NotResumableError"
                    row.error_message = f"cannot re-create job {row.id} ({row.fn}): {exc}"
                    self.store.update(row)
                    continue
                live = LiveJob(row, fn, tuple(args), kwargs)
                if row.state is not None:
                    live.state, live.has_state = codec.loads(row.state), True
                row.status = JobStatus.QUEUED.value
                self.store.update(row)
                with self._cv:
                    self._add_live(live)
                requeued.append(row.id)
        self.store.flush()
        return requeued

    # -- results, priorities, cancel -----------------------------------------------------------
    def result(self, job_id: str, timeout: float | None = None) -> Any:
        """Block until ``job_id`` is done (and durable); return its result.

        Raises:
            JobFailedError: the job ended failed or cancelled.
            TimeoutError: not finished within ``timeout`` seconds.
            StoreError: the store stopped accepting writes (the job's end is not durable).
            KeyError: unknown id, unfinished in the store and not resumed, or released
                from a non-durable store.
        """
        live = self._jobs.get(job_id)
        if live is None:
            row = self.store.get(job_id)
            if row is None:
                raise KeyError(f"unknown job id {job_id!r}")
            if JobStatus(row.status) not in FINISHED:
                raise KeyError(f"job {job_id} is unfinished in the store but not held by this "
                               "scheduler; call resume() first")
            if not self.store.durable:
                raise KeyError(f"job {job_id} was released and its result is not stored "
                               "(the store is not durable)")
            live = LiveJob(row, None, (), {})
            live.value = codec.loads(row.result)
            live.done.set()
        if not live.done.is_set():
            self._check_process("result")
            with self._keep_capacity():
                self._wait_done(live, timeout)
        row = live.row
        if row.status == JobStatus.DONE.value:
            return live.value
        raise JobFailedError([JobFailure(row.id, row.error_class or "", row.error_message,
                                         row.attempts, bool(row.quarantined), row.status)])

    def _wait_done(self, live: LiveJob, timeout: float | None) -> None:
        """Wait for ``live.done``; raise ``TimeoutError`` or the store's ``StoreError``."""
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            left = 0.2 if end is None else min(0.2, end - time.monotonic())
            if live.done.wait(max(left, 0.0)):
                return
            failure = self.store.failure()
            if failure is not None:
                raise failure
            if end is not None and time.monotonic() >= end:
                raise TimeoutError(f"job {live.row.id} not finished after {timeout} s")

    @contextlib.contextmanager
    def _keep_capacity(self) -> Iterator[None]:
        """Around a wait in one of our dispatcher threads (a job waiting on jobs it
        queued): run a stand-in dispatcher meanwhile, so nested waits cannot deadlock."""
        if not getattr(self._tls, "dispatcher", False) or getattr(self._tls, "waiting", False):
            yield
            return
        self._tls.waiting = True
        with self._cv:
            self._spawn()
        try:
            yield
        finally:
            self._tls.waiting = False
            with self._cv:
                self._surplus += 1
                self._cv.notify_all()

    def _check_process(self, what: str) -> None:
        if os.getpid() != self._pid:
            raise RuntimeError(
                f"Scheduler.{what}() called in process {os.getpid()}, a fork of the "
                f"scheduler's process {self._pid} (a job on executor='process'): it has no "
                "dispatcher threads; use executor='local' for jobs that submit jobs")

    def release(self, job_ids: Iterable[str]) -> int:
        """Drop finished jobs from this scheduler's memory (their arguments and results).

        Every job stays in memory until released, so a trainer that scores through
        ``map`` for thousands of steps would otherwise grow without bound (measured:
        ~4.5 KB per score job, 226 MiB after 400 steps of 128 scores). ``map`` releases
        its jobs itself. With a durable store, ``result(id)`` and keyed re-submission
        still answer from the store; with a non-durable one, keyed jobs are kept (their
        result lives only here).

        Args:
            job_ids: ids as returned by ``submit``/``submit_batch``; unknown or
                unfinished ones are skipped.

        Returns:
            how many jobs were dropped.
        """
        dropped = 0
        with self._lock:
            for job_id in job_ids:
                live = self._jobs.get(job_id)
                if live is None or not live.done.is_set():
                    continue
                key = live.row.key
                if key is not None and not self.store.durable:
                    continue
                del self._jobs[job_id]
                if key is not None and self._by_key.get(key) == job_id:
                    del self._by_key[key]
                dropped += 1
        return dropped

    def held_jobs(self) -> int:
        """How many jobs this scheduler holds in memory (unfinished, or finished and
        not yet released)."""
        with self._lock:
            return len(self._jobs)

    def job(self, job_id: str) -> Job:
        """The ``polyrl.types.Job`` view of a live job (payload = ``{"args", "kwargs"}``)."""
        live = self._jobs[job_id]
        with self._lock:
            return live.row.to_job({"args": list(live.args), "kwargs": live.kwargs}, live.value)

    def set_priority(self, job_id: str, priority: float) -> bool:
        """Change a queued/retrying job's priority; False when it is not waiting."""
        with self._cv:
            live = self._jobs.get(job_id)
            if live is None or live.status not in (JobStatus.QUEUED, JobStatus.RETRYING):
                return False
            live.row.priority = priority
            self._ready.set_priority(job_id, priority)
            self.store.update(live.row)
            return True

    def reprioritize(self, callback: Callable[[Job], float | None]) -> int:
        """Call ``callback(job) -> new priority | None`` on every waiting job; returns changes.

        The callback runs without the scheduler lock (it may be slow); a job that
        started meanwhile keeps its old priority.
        """
        with self._lock:
            waiting = [jid for jid, j in self._jobs.items()
                       if j.status in (JobStatus.QUEUED, JobStatus.RETRYING)]
        changed = 0
        for jid in waiting:
            new = callback(self.job(jid))
            if new is not None and new != self._jobs[jid].row.priority:
                changed += int(self.set_priority(jid, float(new)))
        return changed

    def cancel(self, job_id: str) -> bool:
        """Cancel a waiting job (final status ``cancelled``); False when not waiting."""
        with self._cv:
            live = self._jobs.get(job_id)
            if live is None or live.status not in (JobStatus.QUEUED, JobStatus.RETRYING):
                return False
            self._ready.remove(job_id)
            live.cancelled = True
            live.row.error_class, live.row.error_message = "Cancelled", "cancelled by caller"
            self._finish(live, JobStatus.CANCELLED)
            return True

    def metrics(self) -> dict[str, dict[str, Any]]:
        """Per job kind: ``queue_wait_s`` and ``run_s`` (p50/p95/max seconds), ``attempts``,
        ``errors`` (class -> failed attempts), ``status`` counts (this process only)."""
        return self._metrics.snapshot()

    def join(self, timeout: float | None = None) -> bool:
        """Wait until every job has finished; False on timeout (seconds).

        Raises:
            StoreError: the store stopped accepting writes.
            RuntimeError: called from inside one of this scheduler's jobs (it would wait
                for itself) or from a forked worker process.
        """
        if getattr(self._tls, "dispatcher", False):
            raise RuntimeError("Scheduler.join() called from inside one of its own jobs: it "
                               "would wait for that job itself; wait with result()/map()")
        self._check_process("join")
        end = None if timeout is None else time.monotonic() + timeout
        with self._done_cv:
            while self._unfinished > 0:
                failure = self.store.failure()
                if failure is not None:
                    raise failure
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._done_cv.wait(min(left, 0.5) if left is not None else 0.5)
        return True

    def close(self, wait: bool = True, close_store: bool = True) -> None:
        """Stop: wait for queued work (``wait``), stop threads, flush/close the store.

        The store is closed (its lock released) even when waiting raises ``StoreError``.
        """
        try:
            if wait:
                self.join()
        finally:
            with self._cv:
                self._closing = True
                self._cv.notify_all()
            for t in list(self._threads):
                if t.name.removeprefix("polyrl-") not in self._retired:
                    t.join(timeout=5.0)
            self.executor.close()
            try:
                if self.store.failure() is None:
                    self.store.flush()
            finally:
                if close_store:
                    self.store.close()

    def __enter__(self) -> Scheduler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close(wait=exc[0] is None)
