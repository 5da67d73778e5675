"""``units/convert-v1``: convert a quantity to another unit; the answer is one number.

Difficulty ladder (prompt = ``<quantity><unit>><unit>=``, answer = a decimal number):

- 1: an integer, metric or time (``37km>m=`` -> ``37000``)
- 2: one decimal place (``2.5kg>g=`` -> ``2500``)
- 3: imperial to metric, rounded to 2 places (``7in>cm=`` -> ``17.78``)

Split: a prompt is ``test`` when ``crc32(prompt) % 10 < 2`` (20%), else ``train``, so the
two never share a prompt. Reward (a ``Rubric``): ``exact`` (weight 0.7; within 1e-6
relative) + ``close`` (weight 0.3; 1 - 10 * relative error, floored at 0), read from the
last number after the prompt's ``=``; ``Score.passed`` is ``exact == 1``.
"""

from __future__ import annotations

import random
import re
import zlib
from collections.abc import Iterator, Sequence

from polyrl.domains import Answer, Domain, RewardFn, Rubric, answer_text
from polyrl.types import Score, Task

METRIC = [("km", "m", 1000), ("m", "cm", 100), ("m", "mm", 1000), ("kg", "g", 1000),
          ("l", "ml", 1000), ("h", "min", 60), ("min", "s", 60)]
IMPERIAL = [("in", "cm", 2.54), ("ft", "m", 0.3048), ("mi", "km", 1.609344),
            ("lb", "kg", 0.45359237), ("oz", "g", 28.349523125)]
LEVELS = (1, 2, 3)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def fmt(x: float) -> str:
    """``x`` with at most 2 decimals and no trailing zeros: 2500.0 -> "2500"."""
    return f"{x:.2f}".rstrip("0").rstrip(".")


def draw(rng: random.Random, difficulty: int) -> tuple[str, str]:
    """One ``(prompt, answer)`` of ``difficulty``."""
    if difficulty == 1:
        (a, b, f), q = rng.choice(METRIC), rng.randint(2, 99)
    elif difficulty == 2:
        (a, b, f), q = rng.choice(METRIC), rng.randint(11, 99) / 10
    elif difficulty == 3:
        (a, b, f), q = rng.choice(IMPERIAL), rng.randint(2, 99)
    else:
        raise ValueError(f"units/convert-v1 has difficulties 1..3, got {difficulty}")
    return f"{fmt(q)}{a}>{b}=", fmt(q * f)


def parse(task: Task, text: str) -> float | None:
    """The last number after the prompt (an echoed prompt is skipped), or None."""
    prompt = task.prompt[-1]["content"]
    tail = text.rsplit(prompt, 1)[-1] if prompt in text else text
    found = _NUMBER.findall(tail)
    return float(found[-1]) if found else None


def exact(task: Task, value: float | None) -> float:
    gold = float(task.metadata["answer"])
    return float(value is not None and abs(value - gold) <= 1e-6 * max(1.0, abs(gold)))


def close(task: Task, value: float | None) -> float:
    if value is None:
        return 0.0
    gold = float(task.metadata["answer"])
    return max(0.0, 1.0 - 10.0 * abs(value - gold) / abs(gold))


class UnitConversion(Domain):
    """Unit conversion, procedural and seedable (see the module docstring)."""

    id = "units/convert-v1"
    family = "units"
    description = "Unit conversion ('37km>m=' -> 37000), metric and imperial, 3 levels."
    binary = True  # Score.passed is set: pass@k is reported

    def __init__(self) -> None:
        self.rubric = Rubric([RewardFn("exact", exact, 0.7), RewardFn("close", close, 0.3)])

    def tasks(self, split: str, *, difficulty: int | Sequence[int] | None = None,
              n: int | None = None, seed: int = 0) -> Iterator[Task]:
        if split not in ("train", "test"):
            raise ValueError(f"unknown split {split!r}: use 'train' or 'test'")
        if n is None:
            raise ValueError(f"{self.id} is procedural: pass n")
        levels = [difficulty] if isinstance(difficulty, int) else list(difficulty or LEVELS)
        rng = random.Random(f"{self.id}|{split}|{seed}")  # the same seed, the same tasks
        for i in range(n):
            d = rng.choice(levels)
            while True:  # redraw until the prompt belongs to this split
                prompt, answer = draw(rng, d)
                if ("test" if zlib.crc32(prompt.encode()) % 10 < 2 else "train") == split:
                    break
            yield Task(id=f"{split}/d{d}/s{seed}/{i}", domain=self.id, split=split,
                       difficulty=d, prompt=[{"role": "user", "content": prompt}],
                       reference=answer, metadata={"answer": answer})

    def score(self, task: Task, answer: Answer) -> Score:
        score = self.rubric.score(task, parse(task, answer_text(answer)))
        score.passed = score.components["exact"] == 1.0
        return score
