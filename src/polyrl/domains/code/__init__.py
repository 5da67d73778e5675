"""Code domains: Python functions judged by unit tests run in the sandbox.

``code/humaneval-v1`` (HumanEval, 164 tasks), ``code/mbppplus-v1`` (MBPP+, 378 tasks)
and ``code/gen-v1`` (procedural, difficulty 1..5). See ``domain.py`` for the rubric.
"""

from __future__ import annotations

from polyrl.domains.base import Domain


def builtin_domains() -> list[Domain]:
    """The code domains the registry registers (data is read lazily, on first use)."""
    from polyrl.domains.code.gen import CodeGenDomain
    from polyrl.domains.code.humaneval import HumanEvalDomain
    from polyrl.domains.code.mbppplus import MbppPlusDomain

    return [HumanEvalDomain(), MbppPlusDomain(), CodeGenDomain()]
