"""Where a job slice runs: threads (default), forked processes, or Ray tasks.

A *slice* is one call of a job: a plain function runs to its return; a generator
function (a sliced job) runs to its next ``yield state`` and is then re-queued.
Executors run slices synchronously inside one of the scheduler's dispatcher
threads and return a ``SliceOutcome``; ``kill`` is the watchdog's lever.

Isolation and the watchdog:

- ``ThreadExecutor``: fastest; a hung Python thread cannot be killed, so on a
  deadline the watchdog records ``JobTimeoutError``, starts a replacement
  dispatcher thread (capacity is kept) and ignores the late result. Use it for
  jobs that call out to a sandbox or a server (the sandbox enforces its own limits).
- ``ProcessExecutor``: every slice runs in a freshly forked child (a retry always
  gets a fresh process); a hung child is SIGKILLed, a child that dies (segfault,
  OOM kill) becomes ``WorkerLostError``; an exception or result that cannot come back
  through the pipe becomes a ``RemoteJobError`` (the exception's class name and kind
  are kept; an unsendable result is final). Sliced jobs are re-created in the child
  from their last state (``resume_state=``), so their functions must honour it.
- ``RayExecutor``: each slice is one Ray task; a hung task is cancelled with
  ``force=True`` (its worker process is killed); Ray worker/node loss becomes
  ``WorkerLostError``. Needs ``pip install polyrl[ray]`` and ``ray.init`` first.
  The task reports when it starts on a worker (``SliceCall.started``): its deadline
  runs from there, as on the local executor, not from dispatch (a slice queued in
  Ray behind others, or waiting for a worker to start, has not run yet).
"""

from __future__ import annotations

import inspect
import multiprocessing
import multiprocessing.reduction
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from polyrl.errors import WorkerLostError
from polyrl.scheduler.retry import ErrorKind, RemoteJobError, classify_error


@dataclass
class AttemptContext:
    """What a running job may read about its attempt (via ``attempt_context()``).

    Attributes:
        job_id, kind: the job.
        attempt: 1 for the first attempt, 2 for the first retry, ...
        hints: adapted strategy for a retry (``RetryPolicy.adapt``): ``fresh_sandbox``,
            ``memory_scale``, ``avoid_worker``, ``last_error``; empty on attempt 1.
        worker: id of the executor slot running it.
    """

    job_id: str = ""
    kind: str = ""
    attempt: int = 1
    hints: dict[str, Any] = field(default_factory=dict)
    worker: str = ""


_local = threading.local()


def attempt_context() -> AttemptContext:
    """The context of the job running in this thread/process (a default one outside jobs)."""
    return getattr(_local, "ctx", None) or AttemptContext()


@dataclass
class SliceCall:
    """One slice to run: the job function, its arguments and sliced-job state.

    ``gen`` is a live generator (thread executor only); otherwise a sliced job is
    re-created as ``fn(*args, resume_state=state, **kwargs)`` when ``state`` is set.
    ``started`` is the ``time.monotonic()`` at which the slice began to run, set by an
    executor whose ``reports_start`` is True (None until then).
    """

    job_id: str
    fn: Callable[..., Any]
    args: tuple
    kwargs: dict[str, Any]
    ctx: AttemptContext
    state: Any = None
    has_state: bool = False
    gen: Any = None
    handle: Any = None
    started: float | None = None


@dataclass
class SliceOutcome:
    """``kind`` is ``"done"`` (``value`` = result), ``"yield"`` (``value`` = state) or
    ``"error"`` (``error`` set); ``gen`` is the live generator to continue, if any."""

    kind: str
    value: Any = None
    error: BaseException | None = None
    gen: Any = None


def run_slice(call: SliceCall, keep_gen: bool) -> SliceOutcome:
    """Run one slice in this thread; exceptions become ``"error"`` outcomes."""
    _local.ctx = call.ctx
    try:
        gen = call.gen
        if gen is None:
            kwargs = dict(call.kwargs)
            if call.has_state:
                kwargs["resume_state"] = call.state
            out = call.fn(*call.args, **kwargs)
            if not inspect.isgenerator(out):
                return SliceOutcome("done", out)
            gen = out
        try:
            state = next(gen)
        except StopIteration as stop:
            return SliceOutcome("done", stop.value)
        if not keep_gen:
            gen.close()
        return SliceOutcome("yield", state, gen=gen if keep_gen else None)
    except BaseException as exc:  # noqa: BLE001 - every failure is classified by the scheduler
        return SliceOutcome("error", error=exc)
    finally:
        _local.ctx = None


class Executor:
    """Runs slices; ``slots`` dispatcher threads call ``run`` concurrently."""

    name = "base"
    keeps_generators = False
    reports_start = False  # True: ``run`` sets ``call.started``; the deadline runs from it

    def __init__(self, workers: int) -> None:
        if workers < 1:
            raise ValueError(f"executor: workers must be >= 1, got {workers}")
        self.workers = workers
        self.slots = workers

    def run(self, call: SliceCall) -> SliceOutcome:
        """Run one slice to completion (blocking)."""
        raise NotImplementedError

    def pending_limit_s(self, deadline_s: float) -> float:
        """Seconds after dispatch a slice that has not started (``reports_start``
        executors) may wait before it times out anyway; ``deadline_s`` elsewhere."""
        return deadline_s

    def kill(self, call: SliceCall) -> None:
        """Best-effort stop of a slice past its deadline (called from the watchdog)."""

    def close(self) -> None:
        """Release resources."""


class ThreadExecutor(Executor):
    """Runs slices in the dispatcher thread itself (live generators are kept)."""

    name = "local"
    keeps_generators = True

    def run(self, call: SliceCall) -> SliceOutcome:
        return run_slice(call, keep_gen=True)


def _stand_in(job_id: str, what: str, original: BaseException | None,
              exc: BaseException) -> RemoteJobError:
    """A picklable error for an outcome that cannot cross the pipe (``what`` it was)."""
    if original is None:  # an unsendable result or state: it will not change on a retry
        return RemoteJobError(f"job {job_id}: cannot send back its {what}: {exc}",
                              "TypeError", ErrorKind.FINAL.value)
    return RemoteJobError(f"job {job_id}: {type(original).__name__}: {original} (the "
                          f"exception itself could not be sent back: {exc})",
                          type(original).__name__, classify_error(original).value)


def _child(call: SliceCall, conn: Any) -> None:
    out = run_slice(call, keep_gen=False)
    pickler = multiprocessing.reduction.ForkingPickler
    what = {"done": "result", "yield": "state"}.get(out.kind, "exception")
    try:
        buf = pickler.dumps((out.kind, out.value, out.error))
        if out.error is not None:  # an exception must also load in the parent
            pickler.loads(buf)
    except Exception as exc:  # noqa: BLE001 - does not pickle, or (exception) does not load
        buf = pickler.dumps(("error", None, _stand_in(call.job_id, what, out.error, exc)))
    conn.send_bytes(buf)
    conn.close()


class ProcessExecutor(Executor):
    """Runs each slice in a forked child process (killable; fresh process per retry)."""

    name = "process"

    def __init__(self, workers: int) -> None:
        super().__init__(workers)
        self._mp = multiprocessing.get_context("fork")

    def run(self, call: SliceCall) -> SliceOutcome:
        parent, child = self._mp.Pipe(duplex=False)
        proc = self._mp.Process(target=_child, args=(call, child), daemon=True)
        proc.start()
        child.close()
        call.handle = proc
        try:
            msg = parent.recv()
        except EOFError:
            proc.join()
            code = proc.exitcode
            return SliceOutcome("error", error=WorkerLostError(
                f"job {call.job_id}: worker process {proc.pid} died (exit code {code})"))
        except Exception as exc:  # noqa: BLE001 - a result that pickled but does not load
            proc.join()
            return SliceOutcome("error", error=_stand_in(call.job_id, "result", None, exc))
        finally:
            parent.close()
        proc.join()
        kind, value, error = msg
        return SliceOutcome(kind, value, error)

    def kill(self, call: SliceCall) -> None:
        proc = call.handle
        if proc is not None and proc.pid is not None:
            try:
                os.kill(proc.pid, 9)
            except ProcessLookupError:
                pass


def _ray_slice(call: SliceCall) -> Any:
    """Ray task body (a streaming generator): yields ``"started"`` as soon as it runs on
    a worker, then ``(kind, value)``; an error outcome is raised."""
    yield "started"
    out = run_slice(call, keep_gen=False)
    if out.kind == "error":
        raise out.error  # type: ignore[misc]
    yield out.kind, out.value


class RayExecutor(Executor):
    """Runs each slice as one Ray task (``num_cpus=1`` each).

    Args:
        workers: concurrent slices the scheduler keeps in flight per ``ray_inflight``.
        inflight_factor: dispatcher slots per worker (Ray queues the extra ones, which
            hides task round-trip latency; ordering stays the scheduler's).
        start_timeout_s: a slice's deadline runs from its start on a worker; one still
            waiting for a worker ``inflight_factor`` deadlines plus this many seconds
            after dispatch (Ray cannot place it) times out too.
    """

    name = "ray"
    reports_start = True

    def __init__(self, workers: int, inflight_factor: int = 4,
                 start_timeout_s: float = 60.0) -> None:
        super().__init__(workers)
        try:
            import ray
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ImportError("executor='ray' needs Ray: pip install 'polyrl[ray]'") from exc
        if not ray.is_initialized():
            ray.init(num_cpus=workers, include_dashboard=False)
        self._ray = ray
        self._remote = ray.remote(num_cpus=1, max_retries=0,
                                  num_returns="streaming")(_ray_slice)
        self.inflight_factor = inflight_factor
        self.start_timeout_s = start_timeout_s
        self.slots = workers * inflight_factor

    def pending_limit_s(self, deadline_s: float) -> float:
        return self.inflight_factor * deadline_s + self.start_timeout_s

    def run(self, call: SliceCall) -> SliceOutcome:
        ray = self._ray
        refs = self._remote.remote(SliceCall(call.job_id, call.fn, call.args, call.kwargs,
                                             call.ctx, call.state, call.has_state))
        call.handle = refs
        try:
            ray.get(next(refs))  # "started": the slice runs on a worker now
            call.started = time.monotonic()
            kind, value = ray.get(next(refs))
            return SliceOutcome(kind, value)
        except ray.exceptions.RayTaskError as exc:
            cause = exc.cause if isinstance(exc.cause, BaseException) else exc
            return SliceOutcome("error", error=cause)
        except (ray.exceptions.WorkerCrashedError, ray.exceptions.RayActorError) as exc:
            return SliceOutcome("error", error=WorkerLostError(f"job {call.job_id}: {exc}"))
        except BaseException as exc:  # noqa: BLE001 - classified by the scheduler
            return SliceOutcome("error", error=exc)

    def kill(self, call: SliceCall) -> None:
        if call.handle is not None:
            try:
                self._ray.cancel(call.handle, force=True)
            except Exception:  # noqa: BLE001 - best effort; the result is ignored anyway
                pass


def make_executor(name: str | Executor, workers: int) -> Executor:
    """Build the executor named ``"local"`` (threads), ``"process"`` or ``"ray"``."""
    if isinstance(name, Executor):
        return name
    if name in ("local", "thread"):
        return ThreadExecutor(workers)
    if name == "process":
        return ProcessExecutor(workers)
    if name == "ray":
        return RayExecutor(workers)
    raise ValueError(f"executor must be 'local', 'process' or 'ray', got {name!r}")
