"""code/gen-v1: sizes for the tiny model, oracle 1, empty 0, splits, determinism."""

from __future__ import annotations

import pytest

from polyrl.domains.code.gen import CodeGenDomain

DOMAIN = CodeGenDomain()


def test_difficulty_one_fits_a_tiny_byte_level_model() -> None:
    tasks = list(DOMAIN.tasks("train", difficulty=1, n=50))
    assert max(len(t.prompt[0]["content"].encode()) for t in tasks) <= 120
    assert max(len(t.reference.encode()) for t in tasks) <= 24
    assert all(t.metadata["prompt_code"] == "def f(x): return " for t in tasks)


@pytest.mark.parametrize("level", [1, 2, 3, 4, 5])
def test_oracle_scores_one_and_empty_scores_zero(level: int) -> None:
    for task in DOMAIN.tasks("test", difficulty=level, n=2, seed=7):
        assert DOMAIN.score(task, task.reference).reward == pytest.approx(1.0)
        assert DOMAIN.score(task, "").reward == 0.0


def test_difficulty_five_rejects_a_quadratic_solution() -> None:
    task = next(t for t in DOMAIN.tasks("train", difficulty=5, n=20, seed=1)
                if "inversions" in t.prompt[0]["content"])
    naive = ("    return sum(1 for i in range(len(xs)) for j in range(i + 1, len(xs))"
             " if xs[i] > xs[j])\n")
    score = DOMAIN.score(task, naive)
    assert 0 < score.components["tests_passed"] < 1 and not score.passed


def test_splits_are_disjoint_and_generation_is_deterministic() -> None:
    train = list(DOMAIN.tasks("train", difficulty=[1, 2], n=100, seed=3))
    test = list(DOMAIN.tasks("test", difficulty=[1, 2], n=40, seed=3))
    prompts = {t.prompt[0]["content"] for t in train}
    assert not prompts & {t.prompt[0]["content"] for t in test}
    again = list(DOMAIN.tasks("train", difficulty=[1, 2], n=100, seed=3))
    assert [t.to_dict() for t in again] == [t.to_dict() for t in train]
    with pytest.raises(ValueError, match="pass n"):
        next(DOMAIN.tasks("train"))
