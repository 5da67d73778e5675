"""Loading Terminal-Bench-layout task directories (polyrl.domains.terminal.taskdir)."""

from __future__ import annotations

from pathlib import Path

import pytest

from polyrl.domains.terminal.taskdir import (
    TaskFormatError,
    TaskSkipped,
    load_task_dir,
    scan_tasks,
)


def _task(root: Path, name: str, **extra: str) -> Path:
    d = root / name
    (d / "tests").mkdir(parents=True)
    (d / "task.yaml").write_text(extra.pop("yaml", "instruction: make hi.txt\ndifficulty: easy\n"
                                           "max_agent_timeout_sec: 30\n"))
    (d / "solution.sh").write_text("echo hi > hi.txt\n")
    (d / "tests" / "test_outputs.py").write_text(
        "def test_hi():\n    assert open('/workspace/hi.txt').read() == 'hi\\n'\n")
    for rel, text in extra.items():
        (d / rel).write_text(text)
    return d


def test_load_reads_fields(tmp_path: Path) -> None:
    task = load_task_dir(_task(tmp_path, "hello"), domain="terminal/tbench-v1")
    assert task.id == "hello" and task.difficulty == 2
    assert task.reference == "echo hi > hi.txt\n"
    meta = task.metadata
    assert meta["agent_timeout_s"] == 30.0 and meta["max_turns"] == 18
    assert list(meta["tests"]) == ["test_outputs.py"]


def test_container_tasks_are_skipped_with_reason(tmp_path: Path) -> None:
    _task(tmp_path, "a_ok", Dockerfile="FROM ubuntu:22.04\nWORKDIR /workspace\n")
    _task(tmp_path, "b_run", Dockerfile="FROM python:3.11\nRUN pip install numpy\n")
    _task(tmp_path, "c_app", Dockerfile="FROM ubuntu\nWORKDIR /app\n")
    tasks, skipped = scan_tasks(tmp_path, domain="terminal/tbench-v1")
    assert [t.id for t in tasks] == ["a_ok"]
    assert "RUN pip install numpy" in skipped["b_run"]
    assert "WORKDIR /app" in skipped["c_app"]


def test_format_errors_name_file_and_field(tmp_path: Path) -> None:
    d = _task(tmp_path, "bad", yaml="difficulty: 3\n")
    with pytest.raises(TaskFormatError, match=r"task.yaml: instruction"):
        load_task_dir(d, domain="x/y-v1")
    d = _task(tmp_path, "bad2", yaml="instruction: x\ndifficulty: impossible\n")
    with pytest.raises(TaskFormatError, match="difficulty"):
        load_task_dir(d, domain="x/y-v1")
    d = _task(tmp_path, "nosol")
    (d / "solution.sh").unlink()
    with pytest.raises(TaskSkipped, match="solution.sh"):
        load_task_dir(d, domain="x/y-v1")
    with pytest.raises(TaskFormatError, match="not a directory"):
        scan_tasks(tmp_path / "missing", domain="x/y-v1")
