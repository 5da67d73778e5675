"""``math/arith-v1``: procedural integer arithmetic, seedable, from "23+45=" to long nested sums.

Difficulty ladder (prompt = the expression followed by ``=``; answer = an integer):

====  ====================================================  ==========================
 d     expression                                            example
====  ====================================================  ==========================
 1     two 2-digit numbers added                             ``23+45=``
 2     three 2-3 digit numbers, ``+``/``-`` (may be < 0)      ``157-83+21=``
 3     a 2-digit x 1-2 digit product, then ``+``/``-``         ``47*8-215=``
 4     3-4 operations ``+ - *`` on 1-3 digit numbers,         ``(37*18-249)*6+124=``
       parentheses where precedence needs them
 5     7-9 operations on 2-4 digit numbers, nested            ``((4821*37-9821)*(62-919)+...)=``
       parentheses, |answer| < 1e15
====  ====================================================  ==========================

Difficulty 1 fits the tiny byte-level quickstart model (prompt 6 bytes, answer
<= 3 bytes); difficulty 5 needs exact multi-digit multiplication over many
steps, which language models without tools get wrong often.

Splits: a problem belongs to ``test`` when ``crc32(expression) % 10 == 0``
(about 10%), else to ``train``, so the two never share an expression.

Reward (``Rubric``): ``exact`` (weight 0.5; 1.0 when the extracted answer equals
the value, see ``polyrl.domains.extract``) + ``digits`` (weight 0.5; dense credit:
fraction of digit positions, aligned by place value, that agree, halved when the
sign is wrong; 0 for no or a non-integer answer). A perfect answer scores 1.0,
an empty one 0.0; ``Score.passed`` is ``exact == 1``.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Iterator, Sequence

from polyrl.domains.base import Answer, Domain, RewardFn, Rubric, answer_text
from polyrl.domains.extract import ParsedNumber, extract_answer, positional_match
from polyrl.domains.mixture import normalize_difficulty
from polyrl.types import Score, Task

_PREC = {"+": 1, "-": 1, "*": 2}
MAX_ABS_VALUE = 10**15
"""Largest |answer| at difficulty 5 (15 digits)."""


def _num(rng: random.Random, lo_digits: int, hi_digits: int) -> int:
    digits = rng.randint(lo_digits, hi_digits)
    return rng.randint(10 ** (digits - 1) if digits > 1 else 1, 10**digits - 1)


def _tree(rng: random.Random, ops: int, lo: int, hi: int) -> tuple[str, int]:
    """Text of a random expression with ``ops`` binary operators, and its precedence."""
    if ops == 0:
        return str(_num(rng, lo, hi)), 3
    left_ops = rng.randint(0, ops - 1)
    op = rng.choice("+-*")
    lt, lp = _tree(rng, left_ops, lo, hi)
    rt, rp = _tree(rng, ops - 1 - left_ops, lo, hi)
    if lp < _PREC[op]:
        lt = f"({lt})"
    if rp < _PREC[op] or (rp == _PREC[op] and op == "-"):
        rt = f"({rt})"
    return f"{lt}{op}{rt}", _PREC[op]


def generate_expression(rng: random.Random, difficulty: int) -> tuple[str, int]:
    """One expression of ``difficulty`` (1..5): ``(text without '=', integer value)``.

    Raises:
        ValueError: difficulty outside 1..5.
    """
    if difficulty == 1:
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        return f"{a}+{b}", a + b
    if difficulty == 2:
        a, b, c = (_num(rng, 2, 3) for _ in range(3))
        o1, o2 = rng.choice("+-"), rng.choice("+-")
        value = a + (b if o1 == "+" else -b)
        value += c if o2 == "+" else -c
        return f"{a}{o1}{b}{o2}{c}", value
    if difficulty == 3:
        a, b, c = rng.randint(10, 99), _num(rng, 1, 2), _num(rng, 2, 3)
        op = rng.choice("+-")
        return f"{a}*{b}{op}{c}", a * b + (c if op == "+" else -c)
    if difficulty in (4, 5):
        ops, lo, hi = (rng.randint(3, 4), 1, 3) if difficulty == 4 else (rng.randint(7, 9), 2, 4)
        while True:
            text = _tree(rng, ops, lo, hi)[0]
            value = evaluate(text)
            if abs(value) < MAX_ABS_VALUE and "*" in text:
                return text, value
    raise ValueError(f"difficulty must be in 1..5, got {difficulty}")


def evaluate(expr: str) -> int:
    """Value of an integer ``+ - *`` expression with parentheses (a small parser, no ``eval``)."""
    pos = 0

    def atom() -> int:
        nonlocal pos
        if expr[pos] == "(":
            pos += 1
            v = add()
            pos += 1  # ")"
            return v
        start = pos
        while pos < len(expr) and expr[pos].isdigit():
            pos += 1
        return int(expr[start:pos])

    def mul() -> int:
        nonlocal pos
        v = atom()
        while pos < len(expr) and expr[pos] == "*":
            pos += 1
            v *= atom()
        return v

    def add() -> int:
        nonlocal pos
        v = mul()
        while pos < len(expr) and expr[pos] in "+-":
            op = expr[pos]
            pos += 1
            v = v + mul() if op == "+" else v - mul()
        return v

    return add()


def split_of(expression: str, test_per_10: int = 1) -> str:
    """``"test"`` when ``crc32(expression) % 10 < test_per_10``, else ``"train"``."""
    return "test" if zlib.crc32(expression.encode()) % 10 < test_per_10 else "train"


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


class Arithmetic(Domain):
    """Procedural integer arithmetic (see the module docstring for ladder, split and reward).

    Args:
        domain_id: the versioned id (parameterised copies use other names).
        test_per_10: tenths of the problem space held out as ``test`` (1 = 10%).
    """

    family = "math"
    description = "Integer arithmetic, '23+45=' up to nested multi-digit expressions."
    binary = True

    def __init__(self, domain_id: str = "math/arith-v1", *, test_per_10: int = 1) -> None:
        if not 1 <= test_per_10 <= 9:
            raise ValueError(f"test_per_10 must be in 1..9, got {test_per_10}")
        self.id = domain_id
        self.test_per_10 = test_per_10
        self.rubric = Rubric([RewardFn("exact", exact_credit, 0.5),
                              RewardFn("digits", digit_credit, 0.5)])

    def tasks(
        self,
        split: str,
        *,
        difficulty: int | Sequence[int] | None = None,
        n: int | None = None,
        seed: int = 0,
    ) -> Iterator[Task]:
        """Yield ``n`` tasks of ``split``; the difficulty of each is drawn from ``difficulty``.

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
                expr, value = generate_expression(rng, d)
                if split_of(expr, self.test_per_10) == split:
                    break
            yield Task(
                id=f"{split}/d{d}/s{seed}/{i}",
                domain=self.id,
                split=split,
                difficulty=d,
                prompt=[{"role": "user", "content": f"{expr}="}],
                reference=str(value),
                metadata={"answer": str(value), "expression": expr},
            )

    def score(self, task: Task, answer: Answer) -> Score:
        """Rubric score of ``answer``: components ``exact`` and ``digits``; passed = exact."""
        score = self.rubric.score(task, extract_answer(answer_text(answer)))
        score.passed = score.components["exact"] == 1.0
        return score

