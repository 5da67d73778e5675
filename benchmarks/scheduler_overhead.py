"""Scheduler overhead, side by side in one run, and head-of-line latency.

Measures (jobs/s, higher is better):
  - 10,000 no-op jobs and 1,000 jobs of 10 ms: polyrl-local (thread executor,
    SQLiteStore persistence on: every state change written, results acknowledged only
    after commit) vs plain ``concurrent.futures.ThreadPoolExecutor`` with as many workers;
  - the same 10 ms (and no-op) jobs: polyrl-ray (persistence on) vs plain Ray tasks;
  - head of line: 4 long jobs (5 s, sliced every 0.1 s) and 200 short jobs (10 ms,
    one every 25 ms) on 2 workers: p95 latency (submit -> durable result) of the short
    jobs, and the same load with unsliced long jobs for comparison.

Usage: python benchmarks/scheduler_overhead.py [--json] [--workers 4] [--ray-cpus 2]
       [--no-ray] [--quick]
With --json the last stdout line is one JSON object with ``local_vs_futures_10ms``,
``local_vs_futures_noop``, ``ray_vs_plain_ray`` (10 ms jobs), ``ray_vs_plain_ray_noop``,
``short_p95_s`` (sliced), ``short_p95_unsliced_s`` and the raw jobs/s figures.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from polyrl.scheduler import Scheduler, SQLiteStore
from polyrl.scheduler.metrics import percentile
from polyrl.scheduler.probes import noop, sleep_s, sliced_sleep


def rate(n: int, fn) -> float:
    """Jobs per second of ``fn()`` running ``n`` jobs."""
    t0 = time.perf_counter()
    fn()
    return n / (time.perf_counter() - t0)


def bench_local(workers: int, n_noop: int, n_10ms: int, tmp: Path) -> dict[str, float]:
    """polyrl-local (persistence on) vs concurrent.futures, jobs/s."""
    out = {}
    with ThreadPoolExecutor(workers) as pool:
        out["futures_noop_jobs_s"] = rate(n_noop, lambda: list(pool.map(noop, range(n_noop))))
        out["futures_10ms_jobs_s"] = rate(n_10ms, lambda: list(pool.map(sleep_s,
                                                                      [0.01] * n_10ms)))
    sched = Scheduler(SQLiteStore(tmp / "local.sqlite"), workers=workers)
    out["local_noop_jobs_s"] = rate(n_noop, lambda: sched.map(noop, range(n_noop)))
    out["local_10ms_jobs_s"] = rate(n_10ms, lambda: sched.map(sleep_s, [0.01] * n_10ms))
    sched.close()
    return out


def bench_ray(cpus: int, n_noop: int, n_10ms: int, tmp: Path) -> dict[str, float]:
    """polyrl-ray (persistence on) vs plain Ray tasks, jobs/s."""
    import ray

    ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False)
    try:
        r_noop, r_sleep = ray.remote(num_cpus=1)(noop), ray.remote(num_cpus=1)(sleep_s)
        ray.get([r_noop.remote(i) for i in range(200)])  # warm the worker pool
        out = {
            "plain_ray_noop_jobs_s": rate(n_noop, lambda: ray.get(
                [r_noop.remote(i) for i in range(n_noop)])),
            "plain_ray_10ms_jobs_s": rate(n_10ms, lambda: ray.get(
                [r_sleep.remote(0.01) for _ in range(n_10ms)])),
        }
        sched = Scheduler(SQLiteStore(tmp / "ray.sqlite"), executor="ray", workers=cpus)
        out["polyrl_ray_noop_jobs_s"] = rate(n_noop, lambda: sched.map(noop, range(n_noop)))
        out["polyrl_ray_10ms_jobs_s"] = rate(n_10ms, lambda: sched.map(sleep_s,
                                                                       [0.01] * n_10ms))
        sched.close()
        return out
    finally:
        ray.shutdown()


def short_latency_p95(sliced: bool, long_s: float, n_short: int, tmp: Path) -> float:
    """p95 seconds from submit to durable result of short jobs next to 4 long ones."""
    sched = Scheduler(SQLiteStore(tmp / f"hol-{sliced}.sqlite"), workers=2)
    for _ in range(4):
        if sliced:
            sched.submit(sliced_sleep, long_s, 0.1, kind="long", cost=long_s)
        else:
            sched.submit(sleep_s, long_s, kind="long", cost=long_s)
    time.sleep(0.05)
    ids = []
    for _ in range(n_short):
        ids.append(sched.submit(sleep_s, 0.01, kind="short", cost=0.01))
        time.sleep(long_s / n_short)
    lat = []
    for job_id in ids:
        sched.result(job_id)
        row = sched.store.get(job_id)
        lat.append(row.finished_at - row.created_at)
    sched.close()
    return percentile(lat, 0.95)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="last line: one JSON object")
    ap.add_argument("--workers", type=int, default=4, help="local worker threads")
    ap.add_argument("--ray-cpus", type=int, default=2, help="CPUs of the local Ray")
    ap.add_argument("--no-ray", action="store_true", help="skip the Ray comparison")
    ap.add_argument("--quick", action="store_true", help="10x fewer jobs, 1 s long jobs")
    args = ap.parse_args()
    scale = 10 if args.quick else 1
    n_noop, n_10ms = 10_000 // scale, 1_000 // scale
    long_s = 1.0 if args.quick else 5.0
    fig: dict[str, float | None] = {}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        fig.update(bench_local(args.workers, n_noop, n_10ms, tmp))
        fig["local_vs_futures_noop"] = fig["local_noop_jobs_s"] / fig["futures_noop_jobs_s"]
        fig["local_vs_futures_10ms"] = fig["local_10ms_jobs_s"] / fig["futures_10ms_jobs_s"]
        fig["ray_vs_plain_ray"] = fig["ray_vs_plain_ray_noop"] = None
        if not args.no_ray:
            try:
                fig.update(bench_ray(args.ray_cpus, n_noop, n_10ms, tmp))
                fig["ray_vs_plain_ray"] = (fig["polyrl_ray_10ms_jobs_s"]
                                           / fig["plain_ray_10ms_jobs_s"])
                fig["ray_vs_plain_ray_noop"] = (fig["polyrl_ray_noop_jobs_s"]
                                                / fig["plain_ray_noop_jobs_s"])
            except ImportError:
                print("ray not installed: skipping the Ray comparison")
        fig["short_p95_s"] = short_latency_p95(True, long_s, 200, tmp)
        fig["short_p95_unsliced_s"] = short_latency_p95(False, long_s, 200, tmp)
    fig.update(workers=args.workers, ray_cpus=args.ray_cpus, n_noop=n_noop, n_10ms=n_10ms,
               long_job_s=long_s)
    for k, v in fig.items():
        print(f"{k:28s} {v:.3f}" if isinstance(v, float) else f"{k:28s} {v}")
    if args.json:
        print(json.dumps(fig))


if __name__ == "__main__":
    main()
