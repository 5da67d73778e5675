"""The shared Rubric: weighted terms in [0, 1], the sum clamped only against rounding."""

from __future__ import annotations

import math

import pytest

from polyrl.domains.base import Domain, RewardFn, Rubric
from polyrl.errors import GraderError
from polyrl.types import Task

TASK = Task(id="t", domain="x/y-v1", split="test", difficulty=1,
            prompt=[{"role": "user", "content": "q"}], reference="a")


@pytest.mark.parametrize("bad", [math.inf, 2.0, -0.5])
def test_a_weighted_term_out_of_range_is_a_grader_error(bad: float) -> None:
    """A term of 2.0 or inf made up for the others (inf scored 1.0 with every other term
    at 0: the sum was clamped to [0, 1] silently); now it is a grader bug, as NaN is, and
    ``safe_score`` records it instead of rewarding it."""
    rubric = Rubric([RewardFn("right", lambda t, p: 0.0, 0.9),
                     RewardFn("bonus", lambda t, p: bad, 0.1)])
    with pytest.raises(GraderError, match="bonus"):
        rubric.score(TASK, None)

    class Plugin(Domain):
        id = "x/y-v1"

        def tasks(self, split, *, difficulty=None, n=None, seed=0):
            yield TASK

        def score(self, task, answer):
            return rubric.score(task, answer)

    score = Plugin().safe_score(TASK, "a")
    assert score.reward == 0.0 and score.error == "GraderError"


def test_monitored_terms_and_rounding_stay_allowed() -> None:
    rubric = Rubric([RewardFn("right", lambda t, p: 1.0 + 1e-12, 1.0),
                     RewardFn("count", lambda t, p: 7.0, 0.0)])
    score = rubric.score(TASK, None)
    assert score.reward == 1.0 and score.components["count"] == 7.0
