"""Ready-queue ordering: priority, aging, short jobs first among equals."""

from __future__ import annotations

import pytest

from polyrl.scheduler import ReadyQueue


def drain(q: ReadyQueue) -> list[str]:
    out = []
    while (j := q.pop()) is not None:
        out.append(j)
    return out


def test_higher_priority_first_then_short_then_fifo() -> None:
    q = ReadyQueue(aging_per_s=0.0)
    q.push("long", 0.0, 10.0, 100.0)
    q.push("short", 0.0, 0.1, 100.2)
    q.push("urgent", 5.0, 50.0, 100.5)
    q.push("short2", 0.0, 0.1, 100.3)
    assert drain(q) == ["urgent", "short", "short2", "long"]


def test_aging_lets_an_old_low_priority_job_overtake() -> None:
    q = ReadyQueue(aging_per_s=1.0, quantum_s=0.5)
    q.push("old-low", 0.0, 1.0, 0.0)
    q.push("new-high", 2.0, 1.0, 3.0)  # waited 3 s less: aged priority 2 - 3 < 0
    assert q.pop() == "old-low"
    assert q.effective_priority("new-high", 5.0) == pytest.approx(4.0)


def test_set_priority_keeps_waiting_time_and_reorders() -> None:
    q = ReadyQueue(aging_per_s=0.0)
    for i in range(5):
        q.push(f"j{i}", 0.0, 1.0, float(i))
    assert q.set_priority("j3", 9.0)
    assert not q.set_priority("missing", 1.0)
    assert q.remove("j0") and len(q) == 3 + 1
    assert drain(q) == ["j3", "j1", "j2", "j4"]


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="aging_per_s"):
        ReadyQueue(aging_per_s=-1)


def test_repeated_reprioritising_keeps_the_heap_small() -> None:
    q = ReadyQueue(aging_per_s=0.0)
    for i in range(100):
        q.push(f"j{i}", 0.0, 1.0, 0.0)
    for round_ in range(100):
        for i in range(100):
            q.set_priority(f"j{i}", float((i * 7 + round_) % 100))
    assert len(q._heap) <= 2 * 100 + 1024 and len(q) == 100
    got = drain(q)
    assert len(got) == 100 and len(set(got)) == 100
