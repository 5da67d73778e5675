"""Top-level job functions used by the scheduler tests (importable, JSON-safe args)."""

from __future__ import annotations

import os
import time
from collections.abc import Generator

from polyrl import errors
from polyrl.scheduler import attempt_context


def square(x: int) -> int:
    """x squared."""
    return x * x


def logged_square(i: int, log_path: str, sleep_s: float = 0.0) -> int:
    """Append ``i`` to ``log_path`` (one O_APPEND write = one execution), sleep, return i*i."""
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{i}\n".encode())
    finally:
        os.close(fd)
    time.sleep(sleep_s)
    return i * i


def logged_job(item: list) -> int:
    """``logged_square(i, log_path, 0.01)`` taking one ``[i, log_path]`` item (for map)."""
    return logged_square(item[0], item[1], 0.01)


ERRORS = {
    "SandboxError": lambda: errors.SandboxError("sandbox could not start"),
    "WorkerLostError": lambda: errors.WorkerLostError("worker OOM-killed"),
    "PolicyServerError": lambda: errors.PolicyServerError("HTTP 503"),
    "ConnectionError": lambda: ConnectionRefusedError("connection refused"),
    "ParseError": lambda: errors.ParseError("no answer found"),
    "PromptTooLongError": lambda: errors.PromptTooLongError("4097 > 4096 tokens"),
    "ModelCodeError": lambda: errors.ModelCodeError("test_add failed"),
    "PreemptedError": lambda: errors.PreemptedError("node drained"),
    "ValueError": lambda: ValueError("something odd"),
}


def fail_times(name: str, times: int, value: int = 7) -> int:
    """Raise error ``name`` on the first ``times`` attempts (per job), then return ``value``.

    Uses the attempt number (so it behaves the same in threads, processes and Ray);
    preemptions do not advance the attempt number, so a preempted job counts its
    re-queues through a marker file in $TMPDIR instead.
    """
    ctx = attempt_context()
    if name == "PreemptedError":
        marker = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"polyrl-pre-{ctx.job_id}")
        n = int(open(marker).read()) if os.path.exists(marker) else 0
        if n < times:
            with open(marker, "w") as fh:
                fh.write(str(n + 1))
            raise ERRORS[name]()
        return value
    if ctx.attempt <= times:
        raise ERRORS[name]()
    return value


def hints_seen(_: int = 0) -> dict:
    """Fail transiently once, then return the retry hints and attempt number."""
    ctx = attempt_context()
    if ctx.attempt == 1:
        raise errors.WorkerLostError("OOM-killed")
    return {"attempt": ctx.attempt, **ctx.hints}


def hang(seconds: float) -> str:
    """Sleep far past any deadline on attempt 1; return quickly afterwards."""
    if attempt_context().attempt == 1:
        time.sleep(seconds)
        return "late"
    return "ok"


def die(_: int = 0) -> str:
    """SIGKILL the current process on attempt 1 (a worker dying); 'survived' afterwards."""
    if attempt_context().attempt == 1:
        os.kill(os.getpid(), 9)
    return "survived"


def counter_episode(turns: int, resume_state: int | None = None) -> Generator[int, None, int]:
    """A sliced job: ``turns`` turns, yielding the turn count; returns the sum 1..turns."""
    done = resume_state or 0
    while done < turns:
        done += 1
        if done < turns:
            yield done
    return turns * (turns + 1) // 2


class TwoArgError(Exception):
    """Pickles but does not unpickle (``__init__`` takes two arguments, ``args`` holds one)."""

    def __init__(self, host: str, why: str) -> None:
        super().__init__(f"{host}: {why}")


class FlakyHostError(errors.SandboxError):
    """A transient error that does not unpickle either."""

    def __init__(self, host: str, why: str) -> None:
        super().__init__(f"{host}: {why}")


def raise_two_arg(transient: bool) -> str:
    """Raise ``TwoArgError`` (or, on attempt 1 only, the transient ``FlakyHostError``)."""
    if not transient:
        raise TwoArgError("node-3", "bad input")
    if attempt_context().attempt == 1:
        raise FlakyHostError("node-3", "sandbox host lost")
    return "retried"


def text_of(n: int) -> str:
    """A result of ``n`` characters."""
    return "x" * n


SCHED = None  # set by tests whose jobs use their own scheduler


def nested_sum(n: int) -> int:
    """Fan out ``n`` squares on the scheduler running this job; return their sum."""
    assert SCHED is not None
    return sum(SCHED.map(square, range(n), kind="inner"))


def join_self(_: int = 0) -> bool:
    """Call ``join()`` on the scheduler running this job."""
    assert SCHED is not None
    return SCHED.join(timeout=5)


def pid_then_sleep(pid_path: str, seconds: float) -> int:
    """Write this process's pid to ``pid_path``, then sleep ``seconds`` (a long job)."""
    with open(pid_path, "w") as fh:
        fh.write(str(os.getpid()))
    time.sleep(seconds)
    return os.getpid()
