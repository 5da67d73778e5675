"""What the procedural integer-answer math domains share: split, task loop and reward.

``math/arith-v1``, ``math/sequence-v1`` and ``math/function-v1`` each draw one problem
at a time (``ProceduralMath.draw``); this base turns draws into seeded ``Task`` streams
and scores answers:

- split: a problem belongs to ``test`` when ``crc32(key) % 10 < test_per_10`` (its key
  is the expression or the prompt), else to ``train``, so the splits never share one;
- reward (``Rubric``): ``exact`` (weight 0.5; 1.0 when the extracted answer equals the
  integer, see ``polyrl.domains.extract``) + ``digits`` (weight 0.5; dense credit: the
  fraction of digit positions, aligned by place value, that agree, halved when the sign
  is wrong; 0 for no or a non-integer answer). A perfect answer scores 1.0, an empty
  one 0.0; ``Score.passed`` is ``exact == 1``. The answer is read after the last copy
  of the prompt in the completion (``extract.after_echo``): an echoed prompt scores 0.
"""

from __future__ import annotations

import abc
import random
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from polyrl.domains.base import Answer, Domain, RewardFn, Rubric, answer_text
from polyrl.domains.extract import ParsedNumber, after_echo, extract_answer, positional_match
from polyrl.domains.mixture import normalize_difficulty
from polyrl.types import Score, Task


def split_of(key: str, test_per_10: int = 1) -> str:
    """``"test"`` when ``crc32(key) % 10 < test_per_10``, else ``"train"``."""
    return "test" if zlib.crc32(key.encode()) % 10 < test_per_10 else "train"


def exact_credit(task: Task, parsed: ParsedNumber | None) -> float:
    """1.0 when ``parsed`` is the integer ``task.metadata["answer"]`` (not a percentage), else 0."""
    gold = int(task.metadata["answer"])
    return float(parsed is not None and parsed.value == gold and not parsed.percent)


def digit_credit(task: Task, parsed: ParsedNumber | None) -> float:
    """Fraction of digit positions, aligned by place value, that agree with
    ``task.metadata["answer"]``; halved when the sign is wrong; 0 for no or a
    non-integer answer."""
    if parsed is None or not parsed.is_integer:
        return 0.0
    gold = int(task.metadata["answer"])
    pred = int(parsed.value)
    credit = positional_match(str(abs(pred)), str(abs(gold)), align="right")
    if (pred < 0) != (gold < 0):
        credit *= 0.5
    return credit


@dataclass
class Problem:
    """One drawn problem: ``key`` decides its split, ``prompt`` is the user message,
    ``answer`` the integer, ``metadata`` extra task metadata (``answer`` is added)."""

    key: str
    prompt: str
    answer: int
    metadata: dict[str, Any] = field(default_factory=dict)


class ProceduralMath(Domain):
    """Base of seeded, unbounded integer-answer domains (see the module docstring).

    Subclasses set ``id`` default, ``description`` and implement :meth:`draw`.

    Args:
        domain_id: the versioned id (parameterised copies use other names).
        test_per_10: tenths of the problem space held out as ``test`` (1 = 10%).

    Raises:
        ValueError: ``test_per_10`` outside 1..9.
    """

    family = "math"
    binary = True

    def __init__(self, domain_id: str, *, test_per_10: int = 1) -> None:
        if not 1 <= test_per_10 <= 9:
            raise ValueError(f"test_per_10 must be in 1..9, got {test_per_10}")
        self.id = domain_id
        self.test_per_10 = test_per_10
        self.rubric = Rubric([RewardFn("exact", exact_credit, 0.5),
                              RewardFn("digits", digit_credit, 0.5)])

    @abc.abstractmethod
    def draw(self, rng: random.Random, difficulty: int) -> Problem:
        """One random problem of ``difficulty`` (1..5).

        Raises:
            ValueError: difficulty outside 1..5.
        """

    def tasks(
        self,
        split: str,
        *,
        difficulty: int | Sequence[int] | None = None,
        n: int | None = None,
        seed: int = 0,
    ) -> Iterator[Task]:
        """Yield ``n`` tasks of ``split``; the difficulty of each is drawn from ``difficulty``.

        Task ids are ``"{split}/d{difficulty}/s{seed}/{i}"``.

        Raises:
            ValueError: unknown split, ``n`` None, or a difficulty outside 1..5.
        """
        diffs = normalize_difficulty(difficulty)
        if split not in ("train", "test"):
            raise ValueError(f"{self.id}: split must be 'train' or 'test', got {split!r}")
        if n is None:
            raise ValueError(f"{self.id} is procedural (unbounded): pass n")
        rng = random.Random(f"{self.id}|{split}|{seed}")
        for i in range(n):
            d = diffs[0] if len(diffs) == 1 else rng.choice(diffs)
            while True:
                problem = self.draw(rng, d)
                if split_of(problem.key, self.test_per_10) == split:
                    break
            yield Task(
                id=f"{split}/d{d}/s{seed}/{i}",
                domain=self.id,
                split=split,
                difficulty=d,
                prompt=[{"role": "user", "content": problem.prompt}],
                reference=str(problem.answer),
                metadata={"answer": str(problem.answer), **problem.metadata},
            )

    def answer_part(self, task: Task, text: str) -> str:
        """The part of a completion the answer is read from: after an echoed prompt."""
        return after_echo(text, str(task.prompt[-1]["content"]))

    def score(self, task: Task, answer: Answer) -> Score:
        """Rubric score of ``answer``: components ``exact`` and ``digits``; passed = exact."""
        score = self.rubric.score(task, extract_answer(self.answer_part(task, answer_text(answer))))
        score.passed = score.components["exact"] == 1.0
        return score
