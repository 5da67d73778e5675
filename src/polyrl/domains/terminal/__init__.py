"""``terminal``: multi-step shell tasks in a sandbox session (Terminal-Bench task layout)."""

from __future__ import annotations

import os

from polyrl.domains.base import Domain

TBENCH_ENV = "POLYRL_TBENCH_DIR"
"""Environment variable naming a folder of Terminal-Bench-layout tasks to register."""


def builtin_domains() -> list[Domain]:
    """``[terminal/gen-v1]``, plus ``terminal/tbench-v1`` when ``$POLYRL_TBENCH_DIR`` is set.

    ``TbenchDomain(path)`` loads any other folder directly.
    """
    from polyrl.domains.terminal.domain import TbenchDomain, TerminalGenDomain

    domains: list[Domain] = [TerminalGenDomain()]
    if os.environ.get(TBENCH_ENV):
        domains.append(TbenchDomain(os.environ[TBENCH_ENV]))
    return domains
