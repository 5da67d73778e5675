"""``math/function-v1``: function induction; infer ``f`` from a few values, give one more.

The prompt shows values of an unknown integer function and asks for its value at a
new point; the answer is that integer. It tests reading a rule off examples and
applying it (the numeric twin of ``code/gen-v1``, which asks for the rule itself).
Difficulty ladder (``f`` has integer coefficients; shown points are distinct):

====  =================================================  ==============================
 d     f(x)                                               example
====  =================================================  ==============================
 1     ``a*x+b``, a in 1..5, b in 0..9, x in 0..9,         ``f(2)=7,f(5)=16,f(3)=?`` -> 10
       2 points shown
 2     ``a*x+b``, a in +-1..9, b in -20..20, x in -9..9,   ``f(-3)=11,f(2)=-9,f(0)=?``
       2 points shown
 3     ``a*x*x+c``, a in +-1..3, c in -9..9, x in -5..5,   ``f(1)=5,f(2)=11,f(0)=3,f(3)=?``
       3 points shown
 4     ``(a*x+b) % m``, m in 3..7, x in 0..20,            ``f(1)=2,f(2)=0,...,f(9)=?``
       5 points shown
 5     ``a*x*x+b*x+c``, a, b, c in +-1..9, x in -9..9,     4 points shown
====  =================================================  ==============================

Difficulty 1 fits the tiny byte-level quickstart model (prompt <= 22 bytes, answer
<= 2 bytes).

The shown points determine the answer within the level's family: at difficulty 4 five
points of ``(a*x+b) % m`` can fit another ``(a', b', m')`` of the ladder that differs at
the query (``f(13)=2,f(5)=0,f(17)=0,f(7)=2,f(12)=1,f(15)=?``: 1 or 4), about 2% of
draws; such draws are redrawn (``determined``). The other levels are determined by
construction (a line through 2 points, ``a*x*x+c`` through 3, a quadratic through 4).

Splits: a problem belongs to ``test`` when ``crc32(prompt) % 10 == 0`` (about 10%),
else to ``train``; at difficulty 1 there are ~36,000 problems.

Reward: ``exact`` (0.5) + place-value ``digits`` (0.5), as ``math/arith-v1`` (see
``polyrl.domains.math.procedural``).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from polyrl.domains.math.procedural import Problem, ProceduralMath

# difficulty -> (points shown, x range)
_POINTS = {1: (2, (0, 9)), 2: (2, (-9, 9)), 3: (3, (-5, 5)), 4: (5, (0, 20)), 5: (4, (-9, 9))}


def _nonzero(rng: random.Random, hi: int) -> int:
    return rng.randint(1, hi) * rng.choice((-1, 1))


def generate_function(rng: random.Random, difficulty: int) -> tuple[dict[str, int], str]:
    """Coefficients of a random ``f`` of ``difficulty`` (1..5) and its formula text.

    The coefficients are keys of ``{"a", "b", "c", "m"}``; see :func:`apply`.

    Raises:
        ValueError: difficulty outside 1..5.
    """
    if difficulty == 1:
        co = {"a": rng.randint(1, 5), "b": rng.randint(0, 9)}
        return co, f"{co['a']}*x+{co['b']}"
    if difficulty == 2:
        co = {"a": _nonzero(rng, 9), "b": rng.randint(-20, 20)}
        return co, f"{co['a']}*x{co['b']:+d}"
    if difficulty == 3:
        co = {"a": _nonzero(rng, 3), "c": rng.randint(-9, 9)}
        return co, f"{co['a']}*x*x{co['c']:+d}"
    if difficulty == 4:
        co = {"a": rng.randint(1, 9), "b": rng.randint(0, 9), "m": rng.randint(3, 7)}
        return co, f"({co['a']}*x+{co['b']})%{co['m']}"
    if difficulty == 5:
        co = {"a": _nonzero(rng, 9), "b": _nonzero(rng, 9), "c": _nonzero(rng, 9)}
        return co, f"{co['a']}*x*x{co['b']:+d}*x{co['c']:+d}"
    raise ValueError(f"difficulty must be in 1..5, got {difficulty}")


def apply(co: dict[str, int], x: int) -> int:
    """``f(x)`` for coefficients ``co`` of :func:`generate_function`."""
    if "m" in co:
        return (co["a"] * x + co["b"]) % co["m"]
    if "b" in co and "c" in co:
        return co["a"] * x * x + co["b"] * x + co["c"]
    if "c" in co:
        return co["a"] * x * x + co["c"]
    return co["a"] * x + co["b"]


_MOD_FAMILY = [{"a": a, "b": b, "m": m}
               for a in range(1, 10) for b in range(10) for m in range(3, 8)]
"""Every difficulty-4 function ``(a*x+b) % m`` of the ladder."""


def determined(difficulty: int, points: Sequence[tuple[int, int]], query: int) -> bool:
    """True when every function of ``difficulty``'s family through ``points`` gives one
    value at ``query`` (checked for difficulty 4, the only level where it can fail)."""
    if difficulty != 4:
        return True
    values = {apply(co, query) for co in _MOD_FAMILY
              if all(apply(co, x) == y for x, y in points)}
    return len(values) == 1


def render(points: Sequence[tuple[int, int]], query: int) -> str:
    """``"f(2)=7,f(5)=16,f(3)=?"`` for shown ``points`` ``[(x, f(x))]`` and ``query``."""
    return ",".join(f"f({x})={y}" for x, y in points) + f",f({query})=?"


class FunctionInduction(ProceduralMath):
    """Procedural function induction (see the module docstring for ladder, split, reward).

    Args:
        domain_id: the versioned id (parameterised copies use other names).
        test_per_10: tenths of the problem space held out as ``test`` (1 = 10%).

    Raises:
        ValueError: ``test_per_10`` outside 1..9.
    """

    description = "Function induction: values of f at a few points, give f at a new one."

    def __init__(self, domain_id: str = "math/function-v1", *, test_per_10: int = 1) -> None:
        super().__init__(domain_id, test_per_10=test_per_10)

    def draw(self, rng: random.Random, difficulty: int) -> Problem:
        """A function of ``difficulty`` and distinct points that determine the answer
        (see :func:`determined`); its split key is the prompt.

        Raises:
            ValueError: difficulty outside 1..5.
        """
        while True:
            co, formula = generate_function(rng, difficulty)
            shown, (lo, hi) = _POINTS[difficulty]
            xs = rng.sample(range(lo, hi + 1), shown + 1)
            points = [(x, apply(co, x)) for x in xs[:shown]]
            if determined(difficulty, points, xs[shown]):
                break
        text = render(points, xs[shown])
        return Problem(key=text, prompt=text, answer=apply(co, xs[shown]),
                       metadata={"formula": formula, "coefficients": co, "query": xs[shown]})
