"""Cost of a pid namespace per fork-server execution, on the 164 HumanEval checks.

Two servers (``ForkServer(pid_namespace=False)`` and ``pid_namespace=True``; the
Landlock scope left as it is), each running every check once per round with
``--in-flight`` calls at a time (default 2 x workers), rounds interleaved (off, on, off,
on, ...) so that a shared machine's load hits both alike. Prints executions/s per round
and the median of each, and the ratio on/off; ``--json``: the last line is one JSON
object (off_per_s, on_per_s: lists; ratio: median on / median off).

Usage: python benchmarks/forkserver_pidns.py [--rounds 3] [--workers N] [--in-flight N] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

from polyrl.sandbox import ForkServer, Limits, available_cpus
from polyrl.sandbox.humaneval_checks import check_program, load_problems

LIM = Limits(timeout_s=30, cpu_s=20)


def one_round(fs: ForkServer, programs: list[str], in_flight: int) -> float:
    """Run every program once; executions/s. Raises AssertionError on a wrong verdict."""
    t0 = time.perf_counter()
    with ThreadPoolExecutor(in_flight) as pool:
        codes = list(pool.map(lambda p: fs.run_python(p).exit_code, programs))
    took = time.perf_counter() - t0
    assert codes == [0] * len(programs), [i for i, c in enumerate(codes) if c != 0]
    return len(programs) / took


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=available_cpus())
    ap.add_argument("--in-flight", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    programs = [check_program(p) for p in load_problems()]
    in_flight = args.in_flight or 2 * args.workers
    rates: dict[bool, list[float]] = {False: [], True: []}
    servers = {on: ForkServer(limits=LIM, workers=args.workers, pid_namespace=on)
               for on in (False, True)}
    try:
        for fs in servers.values():  # warm up: start, and one round not counted
            one_round(fs, programs[:32], in_flight)
        for _ in range(args.rounds):
            for on, fs in servers.items():
                rates[on].append(one_round(fs, programs, in_flight))
                print(f"pid_namespace={on!s:5} {rates[on][-1]:7.1f} executions/s", flush=True)
        assert servers[True].uses_pid_namespace and not servers[False].uses_pid_namespace
        assert all(fs.restarts == 0 for fs in servers.values())
    finally:
        for fs in servers.values():
            fs.close()
    off, on = statistics.median(rates[False]), statistics.median(rates[True])
    print(f"median: off {off:.1f}/s, on {on:.1f}/s, on/off {on / off:.3f}")
    if args.json:
        print(json.dumps({"off_per_s": rates[False], "on_per_s": rates[True],
                          "ratio": on / off, "workers": args.workers, "in_flight": in_flight}))


if __name__ == "__main__":
    main()
