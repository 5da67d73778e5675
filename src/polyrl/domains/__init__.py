"""Domains: tasks with verifiable rewards behind one interface, and their registry.

Public API::

    from polyrl.domains import get_domain, list_domains, sample_tasks, check_domain
    arith = get_domain("math/arith")          # highest version: math/arith-v1
    tasks = sample_tasks([arith, "recall/needle-v1"], n=16, seed=0)
    score = arith.score(tasks[0], "68")        # Score(reward, components, passed)
    assert check_domain(arith).ok              # the checker every domain passes

Family modules (``polyrl.domains.math`` ...) are imported lazily by the registry.
"""

from __future__ import annotations

from polyrl.domains.base import Answer, Domain, Env, RewardFn, Rubric, answer_text
from polyrl.domains.checker import CheckReport, check_domain, run_actions
from polyrl.domains.mixture import domain_seed, normalize_difficulty, sample_tasks
from polyrl.domains.registry import (
    Registry,
    UnknownDomainError,
    default_registry,
    get_domain,
    list_domains,
    parse_id,
    register,
    skipped,
)

__all__ = [
    "Answer",
    "CheckReport",
    "Domain",
    "Env",
    "Registry",
    "RewardFn",
    "Rubric",
    "UnknownDomainError",
    "answer_text",
    "check_domain",
    "default_registry",
    "domain_seed",
    "get_domain",
    "list_domains",
    "normalize_difficulty",
    "parse_id",
    "register",
    "run_actions",
    "sample_tasks",
    "skipped",
]
