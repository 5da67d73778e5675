"""Test helper: terminal tasks written as Terminal-Bench task folders (``taskdir``)."""

from __future__ import annotations

from pathlib import Path

from polyrl.domains.terminal.domain import TbenchDomain
from polyrl.types import Task


def write_taskdirs(root: Path, tasks: dict[str, tuple[dict[str, str], str | None]],
                   instruction: str, solution: str, test_timeout_s: int
                   ) -> tuple[TbenchDomain, dict[str, Task]]:
    """One task folder under ``root`` per ``name -> (tests, run_tests)`` (``tests``:
    relative path -> text under ``tests/``; ``run_tests``: a ``run-tests.sh`` or None),
    all with ``instruction``, ``solution`` (``solution.sh``) and ``test_timeout_s``;
    returns the domain over ``root`` and its test tasks by id."""
    for name, (tests, run_tests) in tasks.items():
        d = root / name
        (d / "tests").mkdir(parents=True)
        (d / "task.yaml").write_text(f"instruction: {instruction}\ndifficulty: easy\n"
                                     f"max_test_timeout_sec: {test_timeout_s}\n")
        (d / "solution.sh").write_text(solution)
        if run_tests:
            (d / "run-tests.sh").write_text(run_tests)
        for rel, text in tests.items():
            (d / "tests" / rel).write_text(text)
    domain = TbenchDomain(root)
    return domain, {t.id: t for t in domain.tasks("test")}
