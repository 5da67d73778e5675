"""Optional JSONL transcript: one line per execution (ExecResult + backend + limits)."""

from __future__ import annotations

import dataclasses
import json
import os
import threading

from polyrl.sandbox.limits import Limits
from polyrl.types import ExecResult


class Transcript:
    """Append-only JSONL record of executions; safe to share between threads.

    Each line: ``{"backend", "limits": {...}, "kind", "result": ExecResult.to_dict()}``.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        parent = os.path.dirname(self.path)
        if parent:
            os.makedirs(parent, exist_ok=True)
        self._lock = threading.Lock()

    def record(self, result: ExecResult, *, backend: str, limits: Limits, kind: str = "run") -> None:
        """Append one execution's record (one ``write`` of one line)."""
        line = json.dumps({"backend": backend, "kind": kind,
                           "limits": dataclasses.asdict(limits), "result": result.to_dict()},
                          ensure_ascii=False)
        with self._lock, open(self.path, "a", encoding="utf-8") as f:
            f.write(line + "\n")


def read_transcript(path: str | os.PathLike[str]) -> list[dict]:
    """All records of a transcript file, in order."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
