"""Math domains: ``math/arith-v1``, ``math/sequence-v1``, ``math/function-v1`` (procedural)
and ``math/gsm8k-v1`` (GSM8K loader).

Answers are read with ``polyrl.domains.extract`` (``\\boxed{}``, ``#### x``, last
number; fractions, thousands separators, percentages; relative tolerance 1e-6).
"""

from __future__ import annotations

from polyrl.domains.base import Domain
from polyrl.domains.math.arith import Arithmetic, evaluate, generate_expression
from polyrl.domains.math.function import FunctionInduction, generate_function
from polyrl.domains.math.gsm8k import GSM8K, GSM8KItem, load_gsm8k, parse_answer
from polyrl.domains.math.sequence import NumberSequence, generate_sequence

__all__ = [
    "GSM8K",
    "Arithmetic",
    "FunctionInduction",
    "GSM8KItem",
    "NumberSequence",
    "builtin_domains",
    "evaluate",
    "generate_expression",
    "generate_function",
    "generate_sequence",
    "load_gsm8k",
    "parse_answer",
]


def builtin_domains() -> list[Domain]:
    """The registry's math domains: arith, sequence, function (procedural) and gsm8k.

    GSM8K reads its file lazily, so it registers even when the data is absent
    (its ``tasks()``/``split_sizes()`` then raise ``ConfigError``).
    """
    return [Arithmetic(), NumberSequence(), FunctionInduction(), GSM8K()]
