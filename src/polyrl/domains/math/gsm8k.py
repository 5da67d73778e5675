"""``math/gsm8k-v1``: grade-school math word problems (GSM8K, Cobbe et al. 2021, arXiv:2110.14168).

Data: the public GSM8K ``test.jsonl`` (1,319 lines of ``{"question", "answer"}``,
the answer ending in ``#### <number>``). The file is found, in order, at:
the ``path`` argument; ``$POLYRL_DATA_DIR/gsm8k/test.jsonl``; and
``<repo>/../shared/data/gsm8k/test.jsonl`` (a source checkout next to ``shared/``).
It is read on first use, not at import or construction.

Task ids name the source line: ``gsm8k/test/<line>`` with ``<line>`` the 0-based
line number in ``test.jsonl``, whatever polyrl split the item falls in.

Splits: GSM8K's file is its *test* split. polyrl partitions it
deterministically: an item is polyrl-``test`` when
``crc32("gsm8k/test/<line>") % 100 < test_percent`` (default 20, which puts
233 of the 1,319 items in test), else polyrl-``train``. So a polyrl-``test``
score is a held-out score on a fixed subset of the benchmark, not the official
GSM8K number; pass
``test_percent=100`` to expose all 1,319 items as ``test`` (no train split).

Difficulty: the number of solution lines before ``####`` (reasoning steps),
minus one, clipped to 1..5.

Reward: ``correct`` (weight 1): the extracted answer (last ``\\boxed{}``, else
``#### x``, else the last number; see ``polyrl.domains.extract``) matches the
gold number; ``marked`` (weight 0, monitored): the answer used an explicit
``\\boxed{}`` or ``####`` marker. ``Score.passed`` = correct.
"""

from __future__ import annotations

import json
import os
import random
import re
import threading
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from polyrl.domains.base import Answer, Domain, RewardFn, Rubric, answer_text
from polyrl.domains.extract import (
    ParsedNumber,
    extract_answer,
    extract_boxed,
    extract_hash_answer,
    numbers_match,
    parse_number,
)
from polyrl.errors import ConfigError
from polyrl.types import Score, Task

INSTRUCTION = "Solve the problem. End with the final answer as '#### <number>'."
"""Appended to every question."""

_CALC_RE = re.compile(r"<<[^<>]*>>")


def default_path() -> Path:
    """Where the GSM8K file is looked for when no path is given (see the module docstring)."""
    env = os.environ.get("POLYRL_DATA_DIR")
    if env:
        return Path(env) / "gsm8k" / "test.jsonl"
    repo = Path(__file__).resolve().parents[4]  # src/polyrl/domains/math/gsm8k.py -> repo
    return repo.parent / "shared" / "data" / "gsm8k" / "test.jsonl"


@dataclass(frozen=True)
class GSM8KItem:
    """One line of ``test.jsonl``: 0-based ``line``, ``question``, ``solution``, ``answer`` text."""

    line: int
    question: str
    solution: str
    answer: str


def load_gsm8k(path: str | Path) -> list[GSM8KItem]:
    """Read a GSM8K jsonl file.

    Returns:
        one ``GSM8KItem`` per non-blank line, ``answer`` = the number after ``####``
        with thousands separators removed.

    Raises:
        ConfigError: the file is missing, a line is not JSON, lacks ``question``/
            ``answer``, or has no ``#### <number>`` (the message names file and line).
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(str(path), "", "GSM8K data not found (set POLYRL_DATA_DIR to the folder "
                          "holding gsm8k/, or pass path= to the domain)")
    items = []
    with path.open(encoding="utf-8") as f:
        for i, raw in enumerate(f):
            if not raw.strip():
                continue
            try:
                row = json.loads(raw)
                question, solution = row["question"], row["answer"]
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise ConfigError(str(path), f"line {i + 1}", f"bad GSM8K row: {e!r}") from e
            marked = extract_hash_answer(solution)
            gold = parse_number(marked) if marked else None
            if gold is None:
                raise ConfigError(str(path), f"line {i + 1}", "answer has no '#### <number>'")
            items.append(GSM8KItem(i, question, solution, marked.replace(",", "")))
    return items


@dataclass(frozen=True)
class ParsedAnswer:
    """What the GSM8K parser reads: the final ``number`` and whether it was ``marked``."""

    number: ParsedNumber | None
    marked: bool


def parse_answer(text: str) -> ParsedAnswer:
    """Extract the final answer of a completion (``extract_answer``) and its marker use."""
    marked = extract_boxed(text) is not None or extract_hash_answer(text) is not None
    return ParsedAnswer(extract_answer(text), marked)


def _correct(task: Task, parsed: ParsedAnswer) -> float:
    return float(numbers_match(parsed.number, parse_number(task.metadata["answer"])))


def _marked(task: Task, parsed: ParsedAnswer) -> float:
    return float(parsed.marked)


class GSM8K(Domain):
    """GSM8K word problems with a numeric verifier (see the module docstring).

    Args:
        path: the ``test.jsonl`` file; None = ``default_path()``.
        test_percent: percent of items held out as polyrl ``test`` (1..100).
        domain_id: the versioned id.
    """

    family = "math"
    description = "GSM8K grade-school word problems; numeric answer after '####'."
    binary = True

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        test_percent: int = 20,
        domain_id: str = "math/gsm8k-v1",
    ) -> None:
        if not 1 <= test_percent <= 100:
            raise ValueError(f"test_percent must be in 1..100, got {test_percent}")
        self.id = domain_id
        self.path = Path(path) if path is not None else None
        self.test_percent = test_percent
        self._tasks: dict[str, list[Task]] | None = None
        self._lock = threading.Lock()

    def _split_tasks(self) -> dict[str, list[Task]]:
        with self._lock:
            if self._tasks is None:
                items = load_gsm8k(self.path or default_path())
                out: dict[str, list[Task]] = {"train": [], "test": []}
                for item in items:
                    tid = f"gsm8k/test/{item.line}"
                    held_out = zlib.crc32(tid.encode()) % 100 < self.test_percent
                    split = "test" if held_out else "train"
                    steps = item.solution.split("####")[0].strip().count("\n") + 1
                    out[split].append(
                        Task(
                            id=tid,
                            domain=self.id,
                            split=split,
                            difficulty=min(5, max(1, steps - 1)),
                            prompt=[{"role": "user", "content": f"{item.question}\n{INSTRUCTION}"}],
                            reference=_CALC_RE.sub("", item.solution),
                            metadata={"answer": item.answer, "line": item.line},
                        )
                    )
                self._tasks = out
            return self._tasks

    def split_sizes(self) -> dict[str, int | None]:
        """Items per split (reads the file on first call).

        Raises:
            ConfigError: the data file is missing or malformed.
        """
        tasks = self._split_tasks()
        return {k: len(v) for k, v in tasks.items()}

    def tasks(
        self,
        split: str,
        *,
        difficulty: int | Sequence[int] | None = None,
        n: int | None = None,
        seed: int = 0,
    ) -> Iterator[Task]:
        """Yield tasks of ``split``, shuffled by ``seed`` (file order when ``seed`` is None).

        Raises:
            ValueError: unknown split.
            ConfigError: the data file is missing or malformed.
        """
        if split not in ("train", "test"):
            raise ValueError(f"{self.id}: split must be 'train' or 'test', got {split!r}")
        pool = self._split_tasks()[split]
        if difficulty is not None:
            keep = {difficulty} if isinstance(difficulty, int) else set(difficulty)
            pool = [t for t in pool if t.difficulty in keep]
        order = list(range(len(pool)))
        if seed is not None:
            random.Random(f"{self.id}|{split}|{seed}").shuffle(order)
        for i in order[:n] if n is not None else order:
            t = pool[i]
            yield replace(t, prompt=[dict(m) for m in t.prompt], metadata=dict(t.metadata))

    def score(self, task: Task, answer: Answer) -> Score:
        """Score ``answer``: components ``correct`` (weight 1) and ``marked`` (monitored)."""
        score = self.rubric.score(task, parse_answer(answer_text(answer)))
        score.passed = score.components["correct"] == 1.0
        return score

    rubric = Rubric([RewardFn("correct", _correct, 1.0), RewardFn("marked", _marked, 0.0)])
