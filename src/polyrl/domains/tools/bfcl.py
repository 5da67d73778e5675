"""``tools/bfcl-v1``: the Berkeley Function Calling Leaderboard "simple" questions.

Reads BFCL's JSON-lines files (one question per line: ``id``, ``question`` =
list of chat turns, ``function`` = tool specs) and the matching possible-answer
file (``id``, ``ground_truth`` = ``[{fn: {arg: [accepted values]}}]``). Task ids keep
BFCL's ids (``simple_python_0``). Data: Patil et al., "Gorilla: Large Language Model
Connected with Massive APIs" (arXiv:2305.15334) and the BFCL leaderboard data.

Splits: BFCL is an evaluation set; a stable hash puts about a quarter of the
items in ``train`` (crc32(id) % 4 == 0) and the rest in ``test``.
Difficulty: the number of arguments of the gold call, capped to 1..5.
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from polyrl.domains.base import Answer, Domain, answer_text
from polyrl.domains.tools.calls import format_call
from polyrl.domains.tools.matching import bfcl_expected, oracle_calls
from polyrl.domains.tools.prompting import tools_system_prompt
from polyrl.domains.tools.rubric import score_calls
from polyrl.errors import ConfigError
from polyrl.types import Score, Task

QUESTIONS = "BFCL_v4_simple_python.json"
ANSWERS = "possible_answer_BFCL_v4_simple_python.json"


def default_bfcl_dir() -> Path:
    """``$POLYRL_DATA_DIR/bfcl`` when set, else ``../shared/data/bfcl`` beside the checkout."""
    env = os.environ.get("POLYRL_DATA_DIR")
    if env:
        return Path(env) / "bfcl"
    return Path(__file__).resolve().parents[4].parent / "shared" / "data" / "bfcl"


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise ConfigError(str(path), "", "BFCL data not found (set POLYRL_DATA_DIR to the folder "
                          "holding bfcl/, or pass path= to the domain)")
    rows = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise ConfigError(str(path), f"line {lineno}", f"invalid JSON: {e}") from e
    return rows


def load_bfcl(path: str | Path) -> list[Task]:
    """All BFCL simple-python items under ``path`` as tasks (both splits, file order).

    Raises:
        ConfigError: a file is missing or malformed, or a question has no answer.
    """
    root = Path(path)
    questions = _read_jsonl(root / QUESTIONS)
    answers = {row["id"]: row for row in _read_jsonl(root / ANSWERS)}
    tasks = []
    for q in questions:
        qid = q.get("id")
        if qid not in answers:
            raise ConfigError(str(root / ANSWERS), str(qid), "no possible answer for this id")
        turns = q.get("question") or [[]]
        messages = [{"role": m["role"], "content": m["content"]} for m in turns[0]]
        if not messages or not q.get("function"):
            raise ConfigError(str(root / QUESTIONS), str(qid), "empty question or function list")
        expected = bfcl_expected(answers[qid]["ground_truth"])
        n_args = max(len(e["arguments"]) for e in expected)
        reference = json.dumps(
            [c.to_json() for c in oracle_calls(expected, q["function"])], separators=(",", ":")
        )
        split = "train" if zlib.crc32(qid.encode()) % 4 == 0 else "test"
        tasks.append(
            Task(
                id=qid,
                domain=BfclDomain.id,
                split=split,
                difficulty=min(5, max(1, n_args)),
                prompt=[{"role": "system", "content": tools_system_prompt(q["function"])}]
                + messages,
                reference=reference,
                metadata={"tools": q["function"], "expected": expected, "ordered": False},
            )
        )
    return tasks


class BfclDomain(Domain):
    """BFCL simple-python function calling, graded by schema and accepted values.

    Args:
        path: folder holding the two BFCL files; default ``default_bfcl_dir()``.
    """

    id = "tools/bfcl-v1"
    family = "tools"
    description = "BFCL simple-python function calling (400 items), schema + value match"
    binary = True

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else default_bfcl_dir()
        self._tasks: list[Task] | None = None

    def _all(self) -> list[Task]:
        if self._tasks is None:
            self._tasks = load_bfcl(self.path)
        return self._tasks

    def tasks(
        self,
        split: str,
        *,
        difficulty: int | Sequence[int] | None = None,
        n: int | None = None,
        seed: int = 0,
    ) -> Iterator[Task]:
        """BFCL items of ``split`` in file order (``seed`` is unused: the set is fixed)."""
        if split not in ("train", "test"):
            raise ValueError(f"unknown split {split!r}: use 'train' or 'test'")
        want = {difficulty} if isinstance(difficulty, int) else difficulty
        count = 0
        for task in self._all():
            if task.split != split or (want is not None and task.difficulty not in want):
                continue
            if n is not None and count >= n:
                return
            count += 1
            yield task

    def score(self, task: Task, answer: Answer) -> Score:
        """Dense function-call reward (``tools.rubric``); ``passed`` = exact match."""
        return score_calls(task, answer_text(answer))

    def oracle(self, task: Task) -> str:
        """The gold calls as a JSON list (first accepted value of each argument)."""
        return task.reference

    def split_sizes(self) -> dict[str, int | None]:
        """Items per split (about 100 train / 300 test)."""
        tasks = self._all()
        return {s: sum(1 for t in tasks if t.split == s) for s in ("train", "test")}


def format_reference_python(task: Task) -> str:
    """The oracle in BFCL's Python-call syntax, e.g. ``math.factorial(number=5)``."""
    return "[" + ",".join(format_call(c) for c in oracle_calls(task.metadata["expected"], task.metadata["tools"])) + "]"
