"""The function-calling rubric shared by ``tools/gen-v1`` and ``tools/bfcl-v1``.

``Task.metadata`` of a single-turn tools task holds:
    tools: list of function specs ``{"name", "description", "parameters"}``.
    expected: ``[{"name", "arguments": {arg: [accepted values]}}]`` (see ``matching``).
    ordered: True when calls must come in the expected order (sequential tasks);
        False for parallel calls, graded order-insensitively.
"""

from __future__ import annotations

from dataclasses import dataclass

from polyrl.domains.base import RewardFn, Rubric
from polyrl.domains.tools.calls import ToolCall, parse_calls
from polyrl.domains.tools.matching import (
    NAME_ONLY_CREDIT,
    call_credit,
    match_calls,
    spec_of,
    validate_call,
)
from polyrl.types import Score, Task


@dataclass(frozen=True)
class Graded:
    """A completion's calls with the facts the reward terms read."""

    calls: list[ToolCall]
    n_valid: int
    call_match: float
    exact: bool
    grounded: bool = False
    """Some call has a correct argument (or is exact): ``parsed``/``schema_valid`` pay.
    An omittable argument given as ``""`` or as its spec's default is none (``matching``)."""


def grade(task: Task, text: str) -> Graded:
    """Parse and grade one completion against ``task.metadata`` (see module docstring)."""
    meta = task.metadata
    calls = parse_calls(text) or []
    n_valid = sum(1 for c in calls if validate_call(c, meta["tools"]) is None)
    expected = meta["expected"]
    match, exact_pairs = match_calls(
        calls, expected, ordered=bool(meta.get("ordered", False)), specs=meta["tools"]
    )
    exact = (
        bool(calls)
        and len(calls) == len(expected)
        and exact_pairs == len(expected)
        and n_valid == len(calls)
    )
    grounded = any(call_credit(c, e, spec_of(e["name"], meta["tools"])) > NAME_ONLY_CREDIT
                   for c in calls for e in expected)
    return Graded(calls, n_valid, match, exact, grounded)


def _share(task: Task, g: Graded) -> float:
    """``min(1, expected calls / calls given)`` when some call is grounded, else 0: the
    format terms shrink with every surplus call, so spraying candidate calls until one
    has a correct argument does not buy the full ``parsed`` + ``schema_valid`` 0.3."""
    if not g.calls or not g.grounded:
        return 0.0
    return min(1.0, len(task.metadata["expected"]) / len(g.calls))


RUBRIC = Rubric(
    [
        RewardFn("parsed", lambda t, g: _share(t, g), 0.1),
        RewardFn("schema_valid",
                 lambda t, g: g.n_valid / len(g.calls) * _share(t, g) if g.calls else 0.0, 0.2),
        RewardFn("call_match", lambda t, g: g.call_match if g.calls else 0.0, 0.7),
        RewardFn("n_calls", lambda t, g: float(len(g.calls)), 0.0),
    ]
)
"""Weights: parsed 0.1, schema_valid 0.2, call_match 0.7; ``n_calls`` monitored only.
``parsed`` and ``schema_valid`` are 0 unless some call has a correct argument, and are
scaled by ``min(1, expected calls / calls given)`` (no floor for spraying calls)."""


def score_calls(task: Task, text: str) -> Score:
    """Dense reward of a completion; ``Score.passed`` = every call exact, none extra."""
    graded = grade(task, text)
    score = RUBRIC.score(task, graded)
    score.passed = graded.exact
    return score
