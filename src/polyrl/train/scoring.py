"""Score a step's completions: inline, or as ``kind="score"`` jobs of the scheduler.

Scores come from ``Domain.safe_score``: an infrastructure or grader failure is
recorded on the ``Score`` (``ok`` False) and the trainer leaves that completion
out of its group; it is never turned into reward 0.0.

``Domain.score`` is deterministic (the domain contract), so identical single-turn
completions of one task are scored once and the score is shared: a group of G
samples from a confident policy often repeats itself (measured on the quickstart:
44% of code/gen-v1 and 33% of tools/gen-v1 completions were distinct within their
group), and every score is a sandbox run and a durable scheduler record.
Multi-turn episodes are always scored one by one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from polyrl.domains.base import Domain
from polyrl.errors import GraderError, error_class_name
from polyrl.train.groups import first_occurrences
from polyrl.types import Completion, Score, Task


def score_completions(
    domains: Mapping[str, Domain],
    tasks: Sequence[Task],
    completions: Sequence[Completion],
    group_size: int,
    scheduler: Any = None,
) -> list[Score]:
    """One ``Score`` per completion (task-major: task i owns completions i*G .. i*G+G-1).

    Args:
        domains: domain id -> ``Domain``; every ``task.domain`` must be a key.
        tasks: the n tasks generated for.
        completions: n * group_size completions, task-major.
        group_size: G.
        scheduler: a ``polyrl.scheduler.Scheduler``; when given, each score runs as a
            ``kind="score"`` job through ``scheduler.map`` (retries, priorities,
            workers); else scores run inline in this thread.

    Returns:
        scores aligned with ``completions``; a job that failed for good yields a
        ``Score`` whose ``error`` names the failure (``ok`` False).

    Raises:
        ValueError: counts disagree, or a task names a domain that is not given.
    """
    if len(completions) != len(tasks) * group_size:
        raise ValueError(f"{len(completions)} completions for {len(tasks)} tasks x G={group_size}")
    unknown = sorted({t.domain for t in tasks} - set(domains))
    if unknown:
        raise ValueError(f"tasks from domains the trainer was not given: {unknown}")
    pairs = [(tasks[i // group_size], c) for i, c in enumerate(completions)]
    unique, owner = distinct_pairs(pairs)
    if scheduler is None:
        scores = [domains[t.domain].safe_score(t, c) for t, c in unique]
    else:
        fn = _ScoreOne(domains)
        results = scheduler.map(fn, unique, kind="score", on_failure="return")
        scores = [_as_score(r) for r in results]
    return [scores[j] for j in owner]


def distinct_pairs(pairs: Sequence[tuple[Task, Any]]) -> tuple[list[tuple[Task, Any]], list[int]]:
    """Drop repeated single-turn (task, completion) pairs before scoring.

    Two pairs repeat when they hold the same ``Task`` object (so the same hidden tests,
    whatever generated it) and equal completion text and ``finish_reason``; episodes
    (anything but a ``Completion``) never do.

    Args:
        pairs: n (task, completion-or-episode) pairs.

    Returns:
        ``(unique, owner)``: the m <= n pairs to score, first occurrences in order, and
        for each of the n input pairs the index into ``unique`` whose score it takes.
    """
    kept, owner = first_occurrences([
        (id(task), answer.text, answer.finish_reason) if isinstance(answer, Completion)
        else None for task, answer in pairs])
    return [pairs[i] for i in kept], owner


class _ScoreOne:
    """Job function ``(task, completion) -> Score`` via ``Domain.score``.

    Errors propagate so the scheduler classifies them (transient ones are retried);
    a job that fails for good comes back as a ``JobFailure``. A reward outside [0, 1]
    (NaN, inf) gives a failed Score, as ``Domain.safe_score`` does inline.
    """

    def __init__(self, domains: Mapping[str, Domain]) -> None:
        self.domains = dict(domains)

    def __call__(self, pair: tuple[Task, Completion]) -> Score:
        task, completion = pair
        domain = self.domains[task.domain]
        return domain.checked_score(task, domain.score(task, completion))


def _as_score(result: Any) -> Score:
    """A scheduler result as a ``Score``: a ``JobFailure`` becomes a failed Score."""
    if isinstance(result, Score):
        return result
    if hasattr(result, "error_class") and hasattr(result, "error_message"):  # JobFailure
        return Score(reward=0.0, error=result.error_class, error_message=result.error_message)
    err = GraderError(f"score job returned {type(result).__name__}, not a Score")
    return Score(reward=0.0, error=error_class_name(err), error_message=str(err))
