"""Load a shell task from a directory in the Terminal-Bench layout.

Layout read (after the public Terminal-Bench task format)::

    task.yaml      instruction (required), difficulty (1..5 or easy/medium/hard),
                   category, max_agent_timeout_sec, max_test_timeout_sec,
                   max_turns (polyrl extension, default 10 + 4 * difficulty)
    setup.sh       optional: run in the workspace before the episode
    solution.sh    the oracle (run as one command)
    tests/         the check, run after the episode: ``test_*.py`` (pytest),
                   else ``check.py`` or ``check.sh`` printing TAP lines (``ok 1 - ...`` /
                   ``not ok 2 - ...``)
    run-tests.sh   optional: overrides how tests run (``$TEST_DIR`` = the tests folder,
                   a fresh folder outside /workspace; cwd /workspace; its ``python3``
                   finds the cwd's modules after the standard library and
                   site-packages: ``grade_site``)
    Dockerfile / docker-compose.yaml: only a Dockerfile made of FROM/WORKDIR
                   (/workspace)/ENV/LABEL/ARG/CMD lines can run in the sandbox; other
                   tasks are skipped with the reason (they need a container image).

The whole task (instruction, scripts, test files) is copied into ``Task.metadata`` so
tasks are self-contained and can cross process boundaries. A skipped or xfailed pytest
test counts as failed (``env.grade_output``): a task's tests should not skip under its
reference solution.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from polyrl.types import Task

_WORDS = {"easy": 2, "medium": 3, "hard": 4}
_OK_DOCKER = {"FROM", "ENV", "LABEL", "ARG", "CMD", "ENTRYPOINT", "MAINTAINER"}
MAX_TEST_FILE_BYTES = 1 << 20


class TaskSkipped(Exception):
    """The directory is a valid task that this sandbox cannot run; ``str`` is the reason."""


class TaskFormatError(ValueError):
    """The directory is not a well-formed task; the message names the file and field."""


def _container_reason(root: Path) -> str | None:
    for name in ("docker-compose.yaml", "docker-compose.yml"):
        if (root / name).exists():
            compose = yaml.safe_load((root / name).read_text()) or {}
            services = compose.get("services", {}) if isinstance(compose, dict) else {}
            if len(services) > 1:
                return f"{name} defines {len(services)} services (needs containers)"
    docker = root / "Dockerfile"
    if not docker.exists():
        return None
    for line in docker.read_text(encoding="utf-8", errors="replace").splitlines():
        parts = line.strip().split(None, 1)
        if not parts or parts[0].startswith("#"):
            continue
        word = parts[0].upper()
        if word == "WORKDIR" and len(parts) > 1 and parts[1].strip() == "/workspace":
            continue
        if word not in _OK_DOCKER:
            return f"Dockerfile needs a container image ({word} {parts[1] if len(parts) > 1 else ''})"
    return None


def _difficulty(value: Any, path: Path) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 5:
        return value
    if isinstance(value, str) and value.lower() in _WORDS:
        return _WORDS[value.lower()]
    raise TaskFormatError(f"{path}: difficulty: want 1..5 or easy/medium/hard, got {value!r}")


def _number(meta: dict[str, Any], key: str, default: float, path: Path) -> float:
    value = meta.get(key, default)
    if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
        raise TaskFormatError(f"{path}: {key}: want a number > 0, got {value!r}")
    return float(value)


def load_task_dir(root: str | Path, *, domain: str, split: str = "test",
                  task_id: str | None = None) -> Task:
    """Read one task directory into a ``Task`` (see module docstring).

    Raises:
        TaskFormatError: a required file or field is missing or malformed.
        TaskSkipped: the task needs a container image or has no runnable tests.
    """
    root = Path(root)
    meta_path = root / "task.yaml"
    if not meta_path.is_file():
        raise TaskFormatError(f"{meta_path}: missing")
    try:
        meta = yaml.safe_load(meta_path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:
        raise TaskFormatError(f"{meta_path}: invalid YAML: {e}") from e
    if not isinstance(meta, dict) or not isinstance(meta.get("instruction"), str):
        raise TaskFormatError(f"{meta_path}: instruction: missing or not a string")
    why = _container_reason(root)
    if why:
        raise TaskSkipped(why)
    solution = root / "solution.sh"
    if not solution.is_file():
        raise TaskSkipped("no solution.sh (solution.yaml command lists are not supported)")
    tests_dir = root / "tests"
    tests: dict[str, str] = {}
    if tests_dir.is_dir():
        for p in sorted(tests_dir.rglob("*")):
            if p.is_file() and "__pycache__" not in p.parts:
                if p.stat().st_size > MAX_TEST_FILE_BYTES:
                    raise TaskFormatError(f"{p}: test file larger than 1 MiB")
                tests[p.relative_to(tests_dir).as_posix()] = p.read_text(encoding="utf-8")
    run_tests = root / "run-tests.sh"
    if not tests and not run_tests.is_file():
        raise TaskSkipped("no tests/ folder and no run-tests.sh")
    difficulty = _difficulty(meta.get("difficulty", 3), meta_path)
    setup = root / "setup.sh"
    return Task(
        id=task_id or root.name,
        domain=domain,
        split=split,
        difficulty=difficulty,
        prompt=[{"role": "user", "content": meta["instruction"].strip()}],
        reference=solution.read_text(encoding="utf-8"),
        metadata={
            "instruction": meta["instruction"].strip(),
            "category": str(meta.get("category", "")),
            "setup": setup.read_text(encoding="utf-8") if setup.is_file() else "",
            "tests": tests,
            "run_tests": run_tests.read_text(encoding="utf-8") if run_tests.is_file() else "",
            "agent_timeout_s": _number(meta, "max_agent_timeout_sec", 120.0, meta_path),
            "test_timeout_s": _number(meta, "max_test_timeout_sec", 60.0, meta_path),
            "max_turns": int(_number(meta, "max_turns", 10 + 4 * difficulty, meta_path)),
        },
    )


def scan_tasks(root: str | Path, *, domain: str) -> tuple[list[Task], dict[str, str]]:
    """Every task directory directly under ``root`` (sorted by name).

    Returns:
        ``(tasks, skipped)`` where ``skipped`` maps a directory name to its reason.

    Raises:
        TaskFormatError: ``root`` is not a directory, or a task is malformed.
    """
    root = Path(root)
    if not root.is_dir():
        raise TaskFormatError(f"{root}: not a directory of tasks")
    tasks, skipped = [], {}
    for d in sorted(p for p in root.iterdir() if p.is_dir()):
        if not (d / "task.yaml").exists():
            continue
        try:
            tasks.append(load_task_dir(d, domain=domain))
        except TaskSkipped as e:
            skipped[d.name] = str(e)
    return tasks, skipped
