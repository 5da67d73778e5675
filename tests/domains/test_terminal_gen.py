"""terminal/gen-v1: generated tasks pass with their oracle and fail with an empty episode."""

from __future__ import annotations

from pathlib import Path

import pytest

from polyrl.domains.checker import check_domain, run_actions
from polyrl.domains.terminal.domain import TerminalGenDomain
from polyrl.domains.terminal.gen import CATEGORIES, generate


def test_generation_is_seeded_and_split() -> None:
    a = generate("text", 3, seed=1, index=4)
    assert a == generate("text", 3, seed=1, index=4)
    assert a != generate("text", 3, seed=2, index=4)
    assert a[1]["tests/check.py"].count("lambda:") == 3


def test_check_domain_passes(tmp_path: Path) -> None:
    report = check_domain(TerminalGenDomain(cache_dir=tmp_path), n=3)
    assert report.ok, report.problems


@pytest.mark.slow
def test_forty_tasks_across_categories(tmp_path: Path) -> None:
    domain = TerminalGenDomain(cache_dir=tmp_path)
    tasks = list(domain.tasks("train", n=42, seed=0))
    assert {t.metadata["category"] for t in tasks} == set(CATEGORIES)
    assert {t.difficulty for t in tasks} == {1, 2, 3, 4, 5}
    assert len(list(tmp_path.iterdir())) == 42  # written as task directories
    for task in tasks:
        with domain.env(task) as env:
            oracle = run_actions(env, domain.oracle_actions(task))
        with domain.env(task) as env:
            empty = run_actions(env, [env.done_action])
        assert oracle.reward == 1.0, (task.id, oracle.turns[-1].content)
        assert empty.reward == 0.0, (task.id, empty.turns[-1].content)



def test_cached_task_dirs_of_another_generator_are_not_reused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Task dirs were cached by task id (crc of task.yaml): checks fixed in the generator
    # kept running their stale cached copy, holes included.
    import polyrl.domains.terminal.domain as module

    fresh = next(TerminalGenDomain(cache_dir=tmp_path / "fresh").tasks("train", n=1, seed=3))
    real = module.generate

    def older(*args: object) -> tuple[str, dict, str]:
        task_id, files, split = real(*args)
        return task_id, {**files, "tests/check.py": "print('ok 1 - stale')\n"}, split

    monkeypatch.setattr(module, "generate", older)
    stale = next(TerminalGenDomain(cache_dir=tmp_path).tasks("train", n=1, seed=3))
    assert stale.metadata["tests"] != fresh.metadata["tests"]
    monkeypatch.setattr(module, "generate", real)
    again = next(TerminalGenDomain(cache_dir=tmp_path).tasks("train", n=1, seed=3))
    assert again.id == fresh.id and again.metadata["tests"] == fresh.metadata["tests"]
