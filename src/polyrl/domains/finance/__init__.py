"""Finance domains: questions over financial statements, tables and notes.

``finance/tatqa-v1`` (TAT-QA dev set) and ``finance/gen-v1`` (procedural statements,
difficulty 1..5, 5 = 20k+ token reports). Scoring: ``metric.py``.
"""

from __future__ import annotations

from polyrl.domains.base import Domain


def builtin_domains() -> list[Domain]:
    """The finance domains the registry registers (data is read lazily, on first use)."""
    from polyrl.domains.finance.gen import FinanceGenDomain
    from polyrl.domains.finance.tatqa import TatQaDomain

    return [TatQaDomain(), FinanceGenDomain()]
