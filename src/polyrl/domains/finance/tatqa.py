"""``finance/tatqa-v1``: TAT-QA questions over financial report tables and text (test split).

Data: a TAT-QA file (default ``<shared data>/tatqa/tatqa_dataset_dev.json``): a list of
documents, each ``{"table": {"uid", "table": [[cell]]}, "paragraphs": [{"order",
"text"}], "questions": [{"uid", "question", "answer", "answer_type", "scale",
"derivation", ...}]}``. Task ids are the question uids; a question asked twice of one
document is one task (both dropped when their gold answers differ). Scoring: TAT-QA's exact match
and numeracy-focused F1 with scales (see ``metric.py``); reward = F1, passed = EM.
After "TAT-QA: A Question Answering Benchmark on a Hybrid of Tabular and Textual
Content in Finance" (Zhu et al., arXiv:2105.07624).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from polyrl.domains.base import filter_tasks
from polyrl.domains.code.paths import data_path
from polyrl.domains.finance.domain import INSTRUCTION, FinanceDomain, gold_text
from polyrl.domains.finance.metric import DEFAULT_REL_TOL
from polyrl.errors import ConfigError
from polyrl.types import Task


def render_table(rows: list[list[str]]) -> str:
    """A table as pipe-separated lines, one per row."""
    return "\n".join(" | ".join(str(c).strip() for c in row) for row in rows)


def gold_items(question: dict[str, Any]) -> list[str]:
    """The gold answer items of a TAT-QA question (a list for spans, one item otherwise)."""
    answer = question["answer"]
    if isinstance(answer, list):
        return [str(a) for a in answer if str(a).strip()]
    return [str(answer)]


def difficulty_of(question: dict[str, Any]) -> int:
    """1 span, 2 multi-span/count, 3..5 arithmetic by the number of operations."""
    kind = question.get("answer_type", "")
    if kind == "span":
        return 1
    if kind in ("multi-span", "count"):
        return 2
    ops = sum(question.get("derivation", "").count(c) for c in "+-*/")
    return 3 if ops <= 1 else (4 if ops <= 3 else 5)


def _one_task_per_prompt(tasks: list[Task]) -> list[Task]:
    """Tasks whose prompts are the same text are one question: keep the first when their
    gold answers agree, and drop all of them when they do not (no answer could score
    on both; the dev set has one such pair). File order is kept."""
    by_prompt: dict[str, list[Task]] = {}
    for t in tasks:
        by_prompt.setdefault(t.prompt[0]["content"], []).append(t)
    keep = set()
    for same in by_prompt.values():
        if len({t.reference for t in same}) == 1:
            keep.add(same[0].id)
    return [t for t in tasks if t.id in keep]


class TatQaDomain(FinanceDomain):
    """TAT-QA as a domain: every question of the file, in file order, split ``"test"``.

    Args:
        path: a TAT-QA JSON file; default the shared dev set.
        rel_tol: float slack of numeric matches (golds match at their written precision).
    """

    id = "finance/tatqa-v1"
    description = "TAT-QA (hybrid table + text financial QA; EM and numeracy F1 with scales)"

    def __init__(self, path: str | Path | None = None,
                 rel_tol: float = DEFAULT_REL_TOL) -> None:
        super().__init__(rel_tol)
        self.path = Path(path) if path is not None else data_path("tatqa/tatqa_dataset_dev.json")
        self._tasks: list[Task] | None = None

    def _load(self) -> list[Task]:
        if self._tasks is not None:
            return self._tasks
        if not self.path.is_file():
            raise ConfigError(str(self.path), "", "TAT-QA data not found (set POLYRL_DATA_DIR "
                              "to the folder holding tatqa/, or pass path= to the domain)")
        try:
            docs = json.loads(self.path.read_text())
        except json.JSONDecodeError as e:
            raise ConfigError(str(self.path), "", f"not valid JSON: {e}") from e
        tasks = []
        for k, doc in enumerate(docs):
            try:
                table = render_table(doc["table"]["table"])
                paras = sorted(doc["paragraphs"], key=lambda p: int(p.get("order", 0)))
                text = "\n".join(p["text"] for p in paras)
                for q in doc["questions"]:
                    items = gold_items(q)
                    scale = q.get("scale", "") or ""
                    tasks.append(Task(
                        id=q["uid"], domain=self.id, split="test", difficulty=difficulty_of(q),
                        prompt=[{"role": "user", "content":
                                 f"Table:\n{table}\n\nText:\n{text}\n\nQuestion: "
                                 f"{q['question']}\n\n{INSTRUCTION}"}],
                        reference="Answer: " + gold_text(items, scale),
                        metadata={"answer_items": items, "scale": scale,
                                  "answer_type": q["answer_type"],
                                  "derivation": q.get("derivation", "")},
                    ))
            except (KeyError, TypeError, ValueError) as e:
                raise ConfigError(str(self.path), f"[{k}]", f"bad TAT-QA document: {e!r}") from e
        self._tasks = _one_task_per_prompt(tasks)
        return self._tasks

    def tasks(self, split: str, *, difficulty: int | Sequence[int] | None = None,
              n: int | None = None, seed: int = 0) -> Iterator[Task]:
        """Yield TAT-QA questions (``"test"`` split only; file order).

        Raises:
            ValueError: unknown split.
            ConfigError: the data file is missing or malformed (names the path).
        """
        if split not in ("train", "test"):
            raise ValueError(f"unknown split {split!r}: expected 'train' or 'test'")
        if split == "train":
            return
        yield from filter_tasks(self._load(), difficulty, n)

    def split_sizes(self) -> dict[str, int | None]:
        """``{"train": 0, "test": <questions in the file>}``.

        Raises:
            ConfigError: the data file is missing or malformed (``polyrl domains list``
                then shows the domain as unavailable, with this reason).
        """
        return {"train": 0, "test": len(self._load())}
