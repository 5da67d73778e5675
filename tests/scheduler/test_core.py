"""Scheduler behaviour: results, keys, priorities, slicing, watchdog, executors, metrics."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import sched_jobs

from polyrl.scheduler import (
    JobFailedError,
    JobFailure,
    RetryPolicy,
    Scheduler,
    SQLiteStore,
)
from polyrl.scheduler.probes import sleep_s, sliced_sleep

FAST = RetryPolicy(backoff_base_s=0.01, backoff_max_s=0.02)


def test_map_keeps_input_order_and_typed_failures() -> None:
    with Scheduler(workers=3, retry=FAST) as sched:
        assert sched.map(sched_jobs.square, range(50), kind="score") == [i * i for i in range(50)]
        with pytest.raises(JobFailedError) as info:
            sched.map(sched_jobs.fail_times, ["ParseError", "ParseError"])  # TypeError: 1 arg
        assert info.value.failure.error_class == "TypeError" and len(info.value.failures) == 2
        out = sched.map(sched_jobs.hints_seen, [0, 1], on_failure="return")
        assert all(o["attempt"] == 2 for o in out)
        job_id = sched.submit(sched_jobs.fail_times, "PromptTooLongError", 1)
        with pytest.raises(JobFailedError, match="PromptTooLongError"):
            sched.result(job_id)
        bad = sched.map(sched_jobs.fail_times, ["x"], on_failure="return")[0]
        assert isinstance(bad, JobFailure) and bad.quarantined


def test_idempotency_key_never_recomputes(tmp_path: Path) -> None:
    log = tmp_path / "log.txt"
    db = tmp_path / "state.sqlite"
    with Scheduler(SQLiteStore(db), workers=2) as sched:
        a = sched.submit(sched_jobs.logged_square, 3, str(log), key="task-3")
        assert sched.result(a) == 9
        assert sched.submit(sched_jobs.logged_square, 3, str(log), key="task-3") == a
    with Scheduler(SQLiteStore(db), workers=2) as sched:  # a later process, same run dir
        b = sched.submit(sched_jobs.logged_square, 3, str(log), key="task-3")
        assert b == a and sched.result(b) == 9
        assert sched.map(sched_jobs.square, [3, 4], keys=["task-3", "sq-4"]) == [9, 16]
    assert log.read_text().split() == ["3"]


def test_map_releases_its_jobs_and_the_store_still_answers(tmp_path: Path) -> None:
    log = tmp_path / "log.txt"
    with Scheduler(SQLiteStore(tmp_path / "state.sqlite"), workers=2) as sched:
        for step in range(5):  # a trainer's steps: memory must not grow with them
            assert sched.map(sched_jobs.square, range(40), kind="score") == [
                i * i for i in range(40)]
            assert sched.held_jobs() == 0, step
        a = sched.submit(sched_jobs.logged_square, 3, str(log), key="task-3")
        assert sched.result(a) == 9 and sched.release([a]) == 1 and sched.held_jobs() == 0
        assert sched.result(a) == 9  # read back from the durable store
        assert sched.submit(sched_jobs.logged_square, 3, str(log), key="task-3") == a
        assert sched.map(sched_jobs.logged_square, [3], keys=["task-3"]) == [9]
    assert log.read_text().split() == ["3"]  # released keyed jobs are never recomputed
    with Scheduler(workers=2) as sched:  # not durable: results live only in memory
        sched.map(sched_jobs.square, range(10))
        assert sched.held_jobs() == 0
        kept = sched.submit(sched_jobs.square, 4, key="sq-4")
        plain = sched.submit(sched_jobs.square, 5)
        assert sched.result(kept) == 16 and sched.result(plain) == 25
        assert sched.release([kept, plain, "no-such-id"]) == 1  # the keyed one stays
        assert sched.submit(sched_jobs.square, 4, key="sq-4") == kept
        assert sched.result(kept) == 16
        with pytest.raises(KeyError, match="released"):
            sched.result(plain)


def test_durable_jobs_need_importable_functions(tmp_path: Path) -> None:
    with Scheduler(SQLiteStore(tmp_path / "a.sqlite"), require_durable=True) as sched:
        with pytest.raises(ValueError, match="module:qualname"):
            sched.submit(lambda: 1)
    with Scheduler(SQLiteStore(tmp_path / "b.sqlite")) as sched:  # allowed, not resumable
        assert sched.result(sched.submit(lambda: 1)) == 1
        job_id = sched.submit(sched_jobs.square, object())
        with pytest.raises(JobFailedError):  # object() * object() raises TypeError
            sched.result(job_id)
        assert sched.store.get(job_id).args is None


def _gate(event: threading.Event, started: threading.Event | None = None) -> None:
    if started is not None:
        started.set()
    event.wait(10)


def test_reprioritize_and_cancel_while_queued() -> None:
    order: list[int] = []
    gate, started = threading.Event(), threading.Event()
    with Scheduler(workers=1) as sched:
        sched.submit(_gate, gate, started)
        assert started.wait(5)
        ids = [sched.submit(order.append, i) for i in range(6)]
        assert sched.reprioritize(lambda job: float(job.payload["args"][0])) == 5
        assert sched.set_priority(ids[0], 2.5)
        assert sched.cancel(ids[1]) and not sched.cancel(ids[1])
        gate.set()
        sched.join(timeout=10)
        assert sched.job(ids[1]).status.value == "cancelled"
    assert order == [5, 4, 3, 0, 2]


def test_aging_prevents_starvation() -> None:
    order: list[str] = []
    gate, started = threading.Event(), threading.Event()
    with Scheduler(workers=1, aging_per_s=100.0, quantum_s=0.001) as sched:
        sched.submit(_gate, gate, started)
        assert started.wait(5)
        sched.submit(order.append, "low", priority=0.0)
        time.sleep(0.05)  # the low job has aged by 5 priority units
        for i in range(20):
            sched.submit(order.append, f"high{i}", priority=1.0)
        gate.set()
    assert order.index("low") == 0


def test_sliced_job_runs_in_slices_and_keeps_one_attempt(tmp_path: Path) -> None:
    with Scheduler(SQLiteStore(tmp_path / "s.sqlite"), workers=2) as sched:
        job_id = sched.submit(sched_jobs.counter_episode, 5, kind="rollout")
        assert sched.result(job_id) == 15
        statuses = [e[2] for e in sched.store.events(job_id)]
        assert statuses.count("running") == 5 and statuses[-1] == "done"
        assert sched.store.get(job_id).attempts == 1
        assert sched.store.get(job_id).state == "4"


def _short_latency_p95(long_fn, *long_args) -> float:
    sched = Scheduler(workers=2)
    for _ in range(4):
        sched.submit(long_fn, *long_args, cost=1.0, kind="long")
    time.sleep(0.05)
    ids = []
    for _ in range(40):
        ids.append(sched.submit(sleep_s, 0.005, cost=0.005, kind="short"))
        time.sleep(0.02)
    sched.join(timeout=30)
    lat = sorted(sched.store.get(i).finished_at - sched.store.get(i).created_at for i in ids)
    sched.close()
    return lat[int(0.95 * (len(lat) - 1))]


def test_head_of_line_short_jobs_do_not_wait_behind_long_ones() -> None:
    sliced = _short_latency_p95(sliced_sleep, 1.0, 0.05)
    unsliced = _short_latency_p95(sleep_s, 1.0)
    assert sliced < 0.4, sliced
    assert unsliced > 0.5, unsliced  # the same load without slicing blocks the short jobs


@pytest.mark.parametrize("executor", ["local", "process"])
def test_watchdog_times_out_a_hung_job_and_frees_its_slot(executor: str) -> None:
    with Scheduler(workers=1, executor=executor, retry=FAST) as sched:
        t0 = time.time()
        hung = sched.submit(sched_jobs.hang, 3.0, deadline_s=0.3)
        others = sched.map(sched_jobs.square, range(5), kind="other")
        assert sched.result(hung, timeout=10) == "ok"
        assert others == [0, 1, 4, 9, 16] and time.time() - t0 < 2.5
        assert sched.metrics()["job"]["errors"] == {"JobTimeoutError": 1}
        assert sched.store.get(hung).attempts == 2


def test_process_executor_turns_a_dead_worker_into_a_retry() -> None:
    with Scheduler(workers=2, executor="process", retry=FAST) as sched:
        assert sched.map(sched_jobs.die, [0, 1]) == ["survived", "survived"]
        assert sched.metrics()["job"]["errors"] == {"WorkerLostError": 2}
        assert sched.result(sched.submit(sched_jobs.counter_episode, 4)) == 10


def test_metrics_per_kind() -> None:
    with Scheduler(workers=2, retry=FAST) as sched:
        sched.map(sleep_s, [0.01] * 10, kind="score")
        sched.map(sched_jobs.fail_times, ["x"], kind="eval", on_failure="return")
        m = sched.metrics()
    assert m["score"]["run_s"]["p50"] >= 0.009 and m["score"]["attempts"]["total"] == 10
    assert m["score"]["queue_wait_s"]["n"] == 10 and m["score"]["status"] == {"done": 10}
    assert m["eval"]["errors"] == {"TypeError": 2} and m["eval"]["status"] == {"failed": 1}


def test_duplicate_keys_in_one_batch_run_once(tmp_path: Path) -> None:
    log = tmp_path / "log.txt"
    with Scheduler(SQLiteStore(tmp_path / "s.sqlite"), workers=2) as sched:
        items = [[1, str(log)], [1, str(log)], [2, str(log)]]
        out = sched.map(sched_jobs.logged_job, items, keys=["a", "a", "b"])
        assert out == [1, 1, 4]
    assert sorted(log.read_text().split()) == ["1", "2"]
