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

Splits: a problem belongs to ``test`` when ``crc32(expression) % 10 < 3`` (about
30%), else to ``train``, so the two never share an expression. Difficulty 1 has
8100 problems: 30% gives ~2450 distinct held-out prompts, enough to resolve a
+0.015 change in mean reward (10% gave ~820, a 95% interval of about +-0.017).

Reward: ``exact`` (0.5) + place-value ``digits`` (0.5), shared by the procedural math
domains (``polyrl.domains.math.procedural``); ``Score.passed`` is ``exact == 1``.
"""

from __future__ import annotations

import random

from polyrl.domains.math.procedural import (  # noqa: F401 - split_of: re-exported
    Problem,
    ProceduralMath,
    split_of,
)

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


class Arithmetic(ProceduralMath):
    """Procedural integer arithmetic (see the module docstring for ladder, split and reward).

    Args:
        domain_id: the versioned id (parameterised copies use other names).
        test_per_10: tenths of the problem space held out as ``test`` (3 = 30%).

    Raises:
        ValueError: ``test_per_10`` outside 1..9.
    """

    description = "Integer arithmetic, '23+45=' up to nested multi-digit expressions."

    def __init__(self, domain_id: str = "math/arith-v1", *, test_per_10: int = 3) -> None:
        super().__init__(domain_id, test_per_10=test_per_10)

    def draw(self, rng: random.Random, difficulty: int) -> Problem:
        """An expression of ``difficulty``; its split key is the expression (no ``=``).

        Raises:
            ValueError: difficulty outside 1..5.
        """
        expr, value = generate_expression(rng, difficulty)
        return Problem(key=expr, prompt=f"{expr}=", answer=value, metadata={"expression": expr})
