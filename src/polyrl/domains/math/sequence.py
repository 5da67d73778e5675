"""``math/sequence-v1``: procedural integer sequences; the answer is the next term.

Inductive pattern completion (read a rule off a few terms, apply it once more), the
number-series items of aptitude tests. Difficulty ladder (prompt = the terms
separated by ``,`` then ``,?``; answer = the next term, an integer):

====  ======================================================  ============================
 d     rule                                                    example
====  ======================================================  ============================
 1     arithmetic, 3-4 terms, start 10..199, step +-1..9,       ``23,28,33,38,?`` -> ``43``
       every term >= 0 (~6,800 sequences, ~2,050 held out)
 2     arithmetic, 4-5 terms, start -99..999, step +-10..99     ``412,377,342,307,?``
 3     geometric (ratio 2..4) or two alternating steps          ``3,6,12,24,?`` / ``5,8,6,9,?``
 4     quadratic: the differences grow by a constant            ``2,5,10,17,?`` -> ``26``
 5     linear recurrences: ``a(n)=a(n-1)+a(n-2)`` or             ``3,4,7,11,18,?``
       ``a(n)=k*a(n-1)+c``, 5-6 terms
====  ======================================================  ============================

Difficulty 1 fits the tiny byte-level quickstart model (prompt <= 17 bytes, answer
<= 3 bytes): it needs a subtraction (the step) and an addition, both on small
numbers, read from text.

Splits: a sequence belongs to ``test`` when ``crc32(prompt) % 10 < 3`` (about 30%),
else to ``train``, so the two never share a prompt. 30% rather than arith's 10%: the
difficulty-1 space is small, and a held-out set of ~700 gives a 95% interval of about
+-0.014 on a mean-reward difference, wider than the gains RL makes here in 400 s
(+0.012 to +0.017 in four quickstart runs); ~2,050 held-out sequences give about +-0.008.

Reward: ``exact`` (0.5) + place-value ``digits`` (0.5), as ``math/arith-v1`` (see
``polyrl.domains.math.procedural``): dense credit for a next term that is nearly right.
An answer that repeats the shown terms before the next one (``419,447,475,503,531``)
is read after them: the commas of the prompt's list are separators there, never
thousands separators, so the list is not read as one 15-digit number.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

from polyrl.domains.math.procedural import Problem, ProceduralMath
from polyrl.types import Task


def _step(rng: random.Random, lo: int, hi: int) -> int:
    """A non-zero integer with ``lo <= |x| <= hi`` and a random sign."""
    return rng.randint(lo, hi) * rng.choice((-1, 1))


def generate_sequence(rng: random.Random, difficulty: int) -> tuple[list[int], int, str]:
    """One sequence of ``difficulty`` (1..5): ``(shown terms, next term, rule text)``.

    Raises:
        ValueError: difficulty outside 1..5.
    """
    if difficulty == 1:
        while True:
            n, a, d = rng.randint(3, 4), rng.randint(10, 199), _step(rng, 1, 9)
            terms = [a + k * d for k in range(n + 1)]
            if min(terms) >= 0:
                return terms[:n], terms[n], f"arithmetic, step {d}"
    if difficulty == 2:
        n = rng.randint(4, 5)
        a, d = rng.randint(-99, 999), _step(rng, 10, 99)
        terms = [a + k * d for k in range(n + 1)]
        return terms[:n], terms[n], f"arithmetic, step {d}"
    if difficulty == 3:
        if rng.random() < 0.5:
            a, r = rng.randint(1, 20), rng.randint(2, 4)
            terms = [a * r**k for k in range(5)]
            return terms[:4], terms[4], f"geometric, ratio {r}"
        a, s1, s2 = rng.randint(1, 50), _step(rng, 1, 9), _step(rng, 1, 9)
        terms = [a]
        for k in range(5):
            terms.append(terms[-1] + (s1 if k % 2 == 0 else s2))
        return terms[:5], terms[5], f"alternating steps {s1}, {s2}"
    if difficulty == 4:
        a, b, c = rng.randint(1, 4) * rng.choice((-1, 1)), rng.randint(-9, 9), rng.randint(-20, 20)
        terms = [a * k * k + b * k + c for k in range(6)]
        return terms[:5], terms[5], f"quadratic {a}n^2{b:+d}n{c:+d}"
    if difficulty == 5:
        n = rng.randint(5, 6)
        if rng.random() < 0.5:
            terms = [rng.randint(1, 20), rng.randint(1, 20)]
            while len(terms) <= n:
                terms.append(terms[-1] + terms[-2])
            return terms[:n], terms[n], "a(n)=a(n-1)+a(n-2)"
        k, c = rng.randint(2, 3), rng.randint(-9, 9)
        terms = [rng.randint(1, 9)]
        while len(terms) <= n:
            terms.append(k * terms[-1] + c)
        return terms[:n], terms[n], f"a(n)={k}*a(n-1){c:+d}"
    raise ValueError(f"difficulty must be in 1..5, got {difficulty}")


def render(terms: Sequence[int]) -> str:
    """The prompt text of shown ``terms``: ``"23,28,33,38,?"``."""
    return ",".join(str(t) for t in terms) + ",?"


class NumberSequence(ProceduralMath):
    """Procedural next-term prediction (see the module docstring for ladder, split, reward).

    Args:
        domain_id: the versioned id (parameterised copies use other names).
        test_per_10: tenths of the sequence space held out as ``test`` (3 = 30%).

    Raises:
        ValueError: ``test_per_10`` outside 1..9.
    """

    description = "Integer sequences (arithmetic .. recurrences): give the next term."

    def __init__(self, domain_id: str = "math/sequence-v1", *, test_per_10: int = 3) -> None:
        super().__init__(domain_id, test_per_10=test_per_10)

    def answer_part(self, task: Task, text: str) -> str:
        """After an echoed prompt, and after the shown terms when the answer repeats them."""
        text = super().answer_part(task, text)
        terms = r"\s*,\s*".join(re.escape(str(t)) for t in task.metadata["terms"])
        found = list(re.finditer(rf"(?<![\d.-]){terms}\s*,", text))
        return text[found[-1].end():] if found else text

    def draw(self, rng: random.Random, difficulty: int) -> Problem:
        """A sequence of ``difficulty``; its split key is the prompt.

        Raises:
            ValueError: difficulty outside 1..5.
        """
        terms, value, rule = generate_sequence(rng, difficulty)
        text = render(terms)
        return Problem(key=text, prompt=text, answer=value,
                       metadata={"terms": terms, "rule": rule})
