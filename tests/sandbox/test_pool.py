from __future__ import annotations

from polyrl.sandbox import Limits, Sandbox, SandboxPool, available_cpus

SLOW_CORRECT = """
import sys
def solve(n):
    total = 0
    for i in range(n):
        total += i * i % 7
    return total
assert solve(3_000_000) == sum(i * i % 7 for i in range(3_000_000))
print("PASS")
"""


def test_pool_runs_n_at_once_results_in_order(sb: Sandbox):
    with SandboxPool(workers=2) as pool:
        assert pool.workers == 2
        res = pool.map(lambda i: sb.run(["echo", str(i)]), range(8))
    assert [r.stdout.strip() for r in res] == [str(i) for i in range(8)]
    assert SandboxPool().workers == available_cpus()


def test_slow_correct_solution_same_verdict_under_oversubscription(sb: Sandbox):
    """20 runs with twice as many jobs as cores: CPU-time limits make the verdict stable."""
    lim = Limits(timeout_s=60, cpu_s=10)
    with SandboxPool(workers=2 * available_cpus()) as pool:
        futs = [pool.submit(sb.run_python, SLOW_CORRECT, limits=lim) for _ in range(20)]
        res = [f.result() for f in futs]
    verdicts = {(r.exit_code, r.limit_hit, r.stdout) for r in res}
    assert verdicts == {(0, None, "PASS\n")}


def _wait_until(condition, timeout_s: float = 30.0) -> None:
    """Poll ``condition()`` every millisecond until true; AssertionError after
    ``timeout_s`` seconds."""
    import time

    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.001)


def test_fair_gate_admits_waiters_in_arrival_order():
    import threading

    import pytest

    from polyrl.sandbox.pool import FairGate

    gate = FairGate(1)
    order: list[int] = []
    gate.acquire()

    def waiter(i: int) -> None:
        with gate:
            order.append(i)

    threads = []
    for i in range(6):
        threads.append(threading.Thread(target=waiter, args=(i,)))
        threads[-1].start()
        # each one is queued before the next arrives (a fixed 0.05 s sleep is no
        # guarantee on a loaded host, where a started thread may not run for longer)
        _wait_until(lambda n=i + 1: len(gate._waiters) == n)
    # the holder releases and at once tries again: it queues behind the waiters
    gate.release()
    gate.acquire()
    order.append(-1)
    gate.release()
    for t in threads:
        t.join()
    assert order == [0, 1, 2, 3, 4, 5, -1]
    with pytest.raises(ValueError, match="more often"):
        gate.release()
    with pytest.raises(ValueError):
        FairGate(0)


def test_fair_gate_waiter_interrupted_leaves_no_slot_behind():
    import signal
    import threading

    import pytest

    from polyrl.sandbox.pool import FairGate

    gate = FairGate(1)
    gate.acquire()
    # a test run started in the background inherits SIGINT ignored: no KeyboardInterrupt
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        def interrupt() -> None:  # once the main thread is queued (not after a fixed delay)
            _wait_until(lambda: bool(gate._waiters))
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

        threading.Thread(target=interrupt, daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            gate.acquire()  # interrupted while queued
    finally:
        signal.signal(signal.SIGINT, old)
    gate.release()  # nobody waits any more: the slot is free again
    assert gate._free == 1 and not gate._waiters
