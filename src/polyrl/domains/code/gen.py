"""``code/gen-v1``: procedurally generated Python functions, difficulty 1..5, with an oracle.

Tasks are drawn from ``gen_templates``; the expected output of every test comes from
the reference solution (trusted, run in-process); candidates run in the sandbox.
Train and test are disjoint by content: a task belongs to the test split when the
hash of its prompt falls in the test bucket (1 in 5), so no prompt is in both.

The tests are the inputs not shown in the prompt (the shown examples are not graded).

Reward (dense, for small policies): ``0.8 * tests_passed + 0.1 * compiled +
0.1 * output_closeness``; ``compiled`` counts only when the module defines the
function, and ``output_closeness`` is the mean over tests of 1 for a pass, else
``1 / (1 + |out - expected| / (1 + |expected|))`` for a numeric output, else 0.
``Score.passed`` is True when every test passes. A candidate that ignores its input,
where the expected outputs differ, earns 0 on ``tests_passed`` and ``output_closeness``
(``ignores_input``): at most the 0.1 of ``compiled``. It ignores its input when it gives
one and the same output wherever an output earns credit (a pass or a number), or when every test it passes has
the same output and it also gives that output on a test it fails (a constant with a few
other values or errors sprinkled in; a pass by coincidence, ``x*x*5`` for ``x*5`` at
``x = 1`` when it also answers 5 at ``x = -1``, is no evidence either).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterator, Sequence
from typing import Any

from polyrl.domains.base import RewardFn, Rubric
from polyrl.domains.code.domain import (
    CodeDomain,
    Graded,
    _all_passed,
    _compiled,
    _lint,
    _tests_passed,
)
from polyrl.domains.code.gen_templates import TEMPLATES, Problem
from polyrl.domains.code.runner import encode
from polyrl.types import Task

TEST_BUCKETS = 5
"""One prompt hash bucket in this many is the test split."""


def ignores_input(task: Task, g: Graded) -> bool:
    """True, where the expected outputs differ, when the candidate's outputs (the same
    under the tests' comparison, ``TestReport.same_as``) are (1) one and the same on
    every test where an output earns something (a pass, or a number near the expected
    one: at least two such tests), or (2) one and the same on every test it passes, and
    that output is also what it gave on a test it fails: a constant, which solves
    nothing. ``return 0`` / ``return False`` / the most common
    shown output scored 0.24 on average (0.33 at difficulty 5): ``compiled`` 0.1, plus
    outputs near a small expected number and the tests whose expected output happens to
    be that constant; now only the ``compiled`` 0.1. Told by bit-identical outputs on
    every test, a constant was easy to hide: ``1e-9 * hash(args)`` added, raising on or
    returning ``'junk'`` for every fourth input, or a one-element array scored
    0.14-0.18 over 25 tasks. A function that passes tests with different outputs (even
    one that is also wrong elsewhere) keeps its credit: on 91 one-token mutations of
    references (60 tasks) the mean reward went 0.290 -> 0.277, nine of them losing a pass
    by coincidence, or outputs only on trivial inputs, or one number wherever numeric."""
    expected = {json.dumps(case[1], sort_keys=True) for case in task.metadata["cases"]}
    if len(expected) < 2:
        return False
    got = [(i, c) for i, c in enumerate(g.report.same_as) if c is not None]
    earning = {c for i, c in got if g.report.passed[i] or g.report.numbers[i] is not None}
    if sum(1 for i, _ in got if g.report.passed[i] or g.report.numbers[i] is not None) >= 2 \
            and len(earning) == 1 and -1 not in earning:
        return True
    passed = {c for i, c in got if g.report.passed[i]}
    failed = {c for i, c in got if not g.report.passed[i]}
    return len(passed) == 1 and -1 not in passed and bool(passed & failed)


def _gen_tests_passed(task: Task, g: Graded) -> float:
    return 0.0 if ignores_input(task, g) else _tests_passed(task, g)


def _closeness(task: Task, g: Graded) -> float:
    if ignores_input(task, g):
        return 0.0
    cases = task.metadata["cases"]
    total = 0.0
    for i, ok in enumerate(g.report.passed):
        if ok:
            total += 1.0
            continue
        num = g.report.numbers[i] if i < len(g.report.numbers) else None
        expected = cases[i][1]
        if num is not None and isinstance(expected, int | float) and not isinstance(
                expected, bool):
            total += 1.0 / (1.0 + abs(num - expected) / (1.0 + abs(expected)))
    return total / len(g.report.passed) if g.report.passed else 0.0


def gen_rubric() -> Rubric:
    """The dense rubric of ``code/gen-v1`` (see the module docstring)."""
    return Rubric([
        RewardFn("tests_passed", _gen_tests_passed, 0.8),
        RewardFn("compiled", _compiled, 0.1),
        RewardFn("output_closeness", _closeness, 0.1),
        RewardFn("all_passed", _all_passed, 0.0),
        RewardFn("lint_warnings", _lint, 0.0),
    ])


def _call(args: tuple[Any, ...]) -> str:
    return "f(" + ", ".join(repr(a) for a in args) + ")"


def build_task(problem: Problem, difficulty: int, split: str, domain_id: str) -> Task:
    """Turn a ``Problem`` into a ``Task`` (runs the trusted reference for expected outputs)."""
    ns: dict[str, Any] = {}
    exec(compile(problem.prompt_code + problem.reference, "<reference>", "exec"), ns)  # noqa: S102
    fn = ns["f"]
    # The examples shown in the prompt are not graded: a table of them (``{3: 6, 4: 8}
    # .get(x, 0)``) passed 3 of 8 tests and scored 0.51 on average (return 0: 0.28).
    # Nor is a hidden input equal to a shown one (an empty list is often both).
    shown_inputs = problem.inputs[: problem.shown]
    cases = [[encode(tuple(args)), encode(fn(*args))]
             for args in problem.inputs[problem.shown:] if args not in shown_inputs]
    shown = "\n".join(
        f"{_call(args)} == {fn(*args)!r}" for args in problem.inputs[: problem.shown])
    text = (problem.spec + "\n" if problem.spec else "") + shown + "\n" + problem.prompt_code
    digest = hashlib.sha256(text.encode()).hexdigest()
    return Task(
        id=f"gen-d{difficulty}-{digest[:12]}", domain=domain_id, split=split,
        difficulty=difficulty, prompt=[{"role": "user", "content": text}],
        reference=problem.reference,
        metadata={"prompt_code": problem.prompt_code, "entry_point": "f", "kind": "io",
                  "cases": cases, "n_tests": len(cases), "stop": problem.stop,
                  "per_test_timeout_s": 4.0 if difficulty == 5 else 1.0},
    )


def task_split(task: Task) -> str:
    """``"test"`` when the prompt's hash falls in the test bucket, else ``"train"``."""
    digest = hashlib.sha256(task.prompt[0]["content"].encode()).digest()
    return "test" if digest[0] % TEST_BUCKETS == 0 else "train"


class CodeGenDomain(CodeDomain):
    """Procedural Python functions (unbounded; ``tasks`` needs ``n``).

    Difficulty 1-2 prompts are at most ~120 bytes and their references at most ~24
    bytes (a one-line expression continuing ``def f(x): return ``); 5 needs an
    efficient algorithm to pass a large test within the per-test time limit.
    """

    id = "code/gen-v1"
    description = "Procedural Python functions judged by unit tests (difficulty 1..5)"

    def __init__(self, rubric: Rubric | None = None) -> None:
        super().__init__(rubric or gen_rubric())

    def tasks(self, split: str, *, difficulty: int | Sequence[int] | None = None,
              n: int | None = None, seed: int = 0) -> Iterator[Task]:
        """Yield ``n`` tasks of ``split``, difficulties cycling through ``difficulty``.

        Raises:
            ValueError: unknown split, ``n`` is None, or a difficulty outside 1..5.
        """
        if split not in ("train", "test"):
            raise ValueError(f"unknown split {split!r}: expected 'train' or 'test'")
        if n is None:
            raise ValueError(f"{self.id} is procedural: pass n (number of tasks)")
        levels = [difficulty] if isinstance(difficulty, int) else list(difficulty or range(1, 6))
        bad = [d for d in levels if d not in TEMPLATES]
        if bad or not levels:
            raise ValueError(f"difficulty must be in 1..5, got {levels}")
        rng = random.Random(f"{self.id}/{split}/{seed}")
        made = 0
        attempts = 0
        while made < n:
            level = levels[made % len(levels)]
            task = build_task(TEMPLATES[level](rng), level, split, self.id)
            attempts += 1
            if task_split(task) != split:
                if attempts > 1000 * (n + 1):
                    raise RuntimeError(f"{self.id}: cannot draw {split} tasks at {level}")
                continue
            made += 1
            yield task
