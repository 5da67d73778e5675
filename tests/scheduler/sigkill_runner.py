"""Run 200 durable jobs in a real SQLite store until the test SIGKILLs this process.

Usage: python sigkill_runner.py DB_PATH LOG_PATH N_JOBS WORKERS
"""

from __future__ import annotations

import sys

import sched_jobs

from polyrl.scheduler import Scheduler, SQLiteStore


def main() -> None:
    db, log, n, workers = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    sched = Scheduler(SQLiteStore(db), workers=workers, require_durable=True)
    sched.submit_batch(sched_jobs.logged_job, [[i, log] for i in range(n)], kind="score",
                       keys=[f"job-{i}" for i in range(n)])
    print("submitted", flush=True)
    sched.join()
    print("finished", flush=True)  # the test kills us long before this


if __name__ == "__main__":
    main()
