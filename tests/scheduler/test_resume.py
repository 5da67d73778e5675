"""A real SIGKILL of a process running 200 durable jobs, then resume: all done exactly once."""

from __future__ import annotations

import collections
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from polyrl.scheduler import Scheduler, SQLiteStore

HERE = Path(__file__).resolve().parent
N_JOBS, WORKERS = 200, 4


def _done_count(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            return conn.execute("SELECT COUNT(*) FROM jobs WHERE status='done'").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.OperationalError:  # tables not created yet
        return 0


def test_sigkill_then_resume_finishes_every_job_exactly_once(tmp_path: Path) -> None:
    db, log = tmp_path / "run" / "state.sqlite", tmp_path / "executions.log"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "sigkill_runner.py"), str(db), str(log), str(N_JOBS),
         str(WORKERS)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "submitted"
    deadline = time.time() + 60
    while _done_count(db) < 60 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGKILL)
    _, err = proc.communicate(timeout=10)
    assert proc.returncode == -signal.SIGKILL, err

    store = SQLiteStore(db)
    rows = {r.key: r for r in store._select("1=1", ())}
    done_before = {k: r.result for k, r in rows.items() if r.status == "done"}
    unfinished = {r.id for r in store.unfinished()}
    assert len(rows) == N_JOBS and 60 <= len(done_before) < N_JOBS
    assert len(unfinished) == N_JOBS - len(done_before)

    sched = Scheduler(store, workers=WORKERS)
    assert set(sched.resume()) == unfinished
    assert sched.join(timeout=60)
    for key, row in rows.items():
        assert sched.result(row.id) == int(key.split("-")[1]) ** 2
    sched.close(close_store=False)

    after = {r.key: r for r in store._select("1=1", ())}
    assert all(r.status == "done" for r in after.values())
    assert all(after[k].result == v for k, v in done_before.items())  # no result lost
    done_events = collections.Counter(e[0] for e in store.events() if e[2] == "done")
    assert set(done_events.values()) == {1} and len(done_events) == N_JOBS
    store.close()

    runs = collections.Counter(int(x) for x in log.read_text().split())
    assert set(runs) == set(range(N_JOBS))
    for key in done_before:  # a finished job is never computed again
        assert runs[int(key.split("-")[1])] == 1
    twice = [i for i, c in runs.items() if c > 1]
    assert max(runs.values()) <= 2 and len(twice) <= 2 * WORKERS, twice  # only in-flight ones
