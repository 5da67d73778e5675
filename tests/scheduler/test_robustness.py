"""What a skeptical user throws at the scheduler: exceptions that cannot cross a process
boundary, results too large for SQLite, jobs that use their own scheduler, a wall clock
that jumps, and (test_store_failures.py) corrupt, shared, full or read-only stores."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest
import sched_jobs

from polyrl.scheduler import JobFailedError, JobFailure, RetryPolicy, Scheduler, SQLiteStore

FAST = RetryPolicy(backoff_base_s=0.01, backoff_max_s=0.02)


def test_process_worker_exception_that_does_not_unpickle_fails_the_job_not_the_slot() -> None:
    # Before: parent.recv() raised TypeError in the dispatcher thread, which died; the job
    # stayed "running" for ever and, with one worker, nothing else ever ran.
    with Scheduler(workers=1, executor="process", retry=FAST) as sched:
        bad = sched.submit(sched_jobs.raise_two_arg, False)
        with pytest.raises(JobFailedError) as info:
            sched.result(bad, timeout=20)
        assert info.value.failure.error_class == "TwoArgError"  # the original class is kept
        assert "node-3: bad input" in info.value.failure.error_message
        # a transient error that does not unpickle keeps its kind: retried, then succeeds
        assert sched.result(sched.submit(sched_jobs.raise_two_arg, True), timeout=20) == "retried"
        assert sched.metrics()["job"]["errors"] == {"TwoArgError": 2, "FlakyHostError": 1}
        assert sched.result(sched.submit(sched_jobs.square, 7), timeout=20) == 49


@pytest.mark.skipif(not hasattr(sqlite3.Connection, "setlimit"), reason="Python >= 3.11")
def test_a_result_too_large_for_sqlite_fails_that_job_only(tmp_path: Path) -> None:
    # Before: SQLite refused the row ("string or blob too big"), the writer thread
    # stopped and every job of the run hung. 200 kB stands in for SQLite's 1 GB default.
    store = SQLiteStore(tmp_path / "s.sqlite")
    store._wconn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 200_000)  # Python >= 3.11
    with Scheduler(store, workers=2, retry=FAST) as sched:
        out = sched.map(sched_jobs.text_of, [300_000, 10], on_failure="return", timeout=20)
        assert isinstance(out[0], JobFailure) and out[0].attempts == 1
        assert "over the store's limit" in out[0].error_message
        assert out[1] == "x" * 10 and store.failure() is None
        assert sched.map(sched_jobs.square, [3], timeout=20) == [9]


def test_a_job_can_fan_out_on_its_own_scheduler_without_deadlock() -> None:
    # Before: every dispatcher thread blocked in map() on inner jobs no thread could run.
    with Scheduler(workers=2, retry=FAST) as sched:
        sched_jobs.SCHED = sched
        try:
            assert sched.map(sched_jobs.nested_sum, [3, 4, 5], timeout=20) == [5, 14, 30]
            with pytest.raises(JobFailedError, match="wait for that job itself"):
                sched.result(sched.submit(sched_jobs.join_self), timeout=20)
            n = len([t for t in sched._threads if t.is_alive()])
            assert n == 2, n  # the stand-in dispatcher threads have stopped again
        finally:
            sched_jobs.SCHED = None


def test_a_forked_worker_using_the_scheduler_fails_fast() -> None:
    # Before: the forked child waited for dispatcher threads it does not have, until the
    # job's deadline (default one hour).
    with Scheduler(workers=1, executor="process", retry=FAST) as sched:
        sched_jobs.SCHED = sched
        try:
            t0 = time.monotonic()
            with pytest.raises(JobFailedError, match="fork of the scheduler"):
                sched.result(sched.submit(sched_jobs.nested_sum, 2, deadline_s=30), timeout=60)
            assert time.monotonic() - t0 < 10
        finally:
            sched_jobs.SCHED = None


def test_a_wall_clock_step_does_not_time_out_running_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    # An NTP step of +1 h while a 0.5 s job with a 60 s deadline runs. Before: the
    # watchdog compared time.time() with the deadline and killed it (JobTimeoutError).
    gate, started = threading.Event(), threading.Event()

    def job() -> str:
        started.set()
        gate.wait(10)
        return "ok"

    with Scheduler(workers=1, retry=FAST) as sched:
        job_id = sched.submit(job, deadline_s=60.0)
        assert started.wait(10)
        real = time.time
        monkeypatch.setattr(time, "time", lambda: real() + 3600.0)
        time.sleep(0.3)  # the watchdog looks every 20 ms
        gate.set()
        assert sched.result(job_id, timeout=20) == "ok"
        assert sched.metrics()["job"]["errors"] == {}
        assert sched.store.get(job_id).attempts == 1
