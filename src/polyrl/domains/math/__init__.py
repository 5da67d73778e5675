"""Math domains: ``math/arith-v1`` (procedural) and ``math/gsm8k-v1`` (GSM8K loader).

Answers are read with ``polyrl.domains.extract`` (``\\boxed{}``, ``#### x``, last
number; fractions, thousands separators, percentages; relative tolerance 1e-6).
"""

from __future__ import annotations

from polyrl.domains.base import Domain
from polyrl.domains.math.arith import Arithmetic, evaluate, generate_expression
from polyrl.domains.math.gsm8k import GSM8K, GSM8KItem, load_gsm8k, parse_answer

__all__ = [
    "GSM8K",
    "Arithmetic",
    "GSM8KItem",
    "builtin_domains",
    "evaluate",
    "generate_expression",
    "load_gsm8k",
    "parse_answer",
]


def builtin_domains() -> list[Domain]:
    """The registry's math domains: ``math/arith-v1`` and ``math/gsm8k-v1``.

    GSM8K reads its file lazily, so it registers even when the data is absent
    (its ``tasks()``/``split_sizes()`` then raise ``ConfigError``).
    """
    return [Arithmetic(), GSM8K()]
