"""code/humaneval-v1: canonical solutions pass, `return None` bodies fail, formats accepted."""

from __future__ import annotations

import time

import pytest

from polyrl.domains.code.humaneval import HumanEvalDomain, count_tests
from polyrl.errors import ConfigError


@pytest.fixture(scope="module")
def domain() -> HumanEvalDomain:
    return HumanEvalDomain()


def test_loads_164_test_tasks_with_their_own_ids(domain: HumanEvalDomain) -> None:
    tasks = list(domain.tasks("test"))
    assert len(tasks) == 164 and tasks[0].id == "HumanEval/0"
    assert list(domain.tasks("train")) == []
    assert domain.split_sizes() == {"train": 0, "test": 164}
    assert all(t.metadata["n_tests"] == count_tests(t.metadata["test_module"],
                                                    t.metadata["entry_point"]) for t in tasks)


def test_full_function_in_a_fence_and_partial_credit(domain: HumanEvalDomain) -> None:
    task = next(domain.tasks("test", n=1))  # has_close_elements
    fenced = ("Sure!\n```python\ndef has_close_elements(numbers: List[float], threshold: float)"
              " -> bool:\n    return any(abs(a - b) < threshold for i, a in enumerate(numbers)"
              " for b in numbers[i + 1:])\n```")
    assert domain.score(task, fenced).reward == 1.0
    always_false = domain.grade(task, "    return False\n").report
    # check() of HumanEval/0 has 7 asserts; 3 expect False
    assert len(always_false.passed) == 7 and sum(always_false.passed) == 3
    partial = HumanEvalDomain(partial_credit=1.0)
    assert partial.score(task, "    return False\n").reward == pytest.approx((0 + 3 / 7) / 2)


def test_missing_file_names_the_path(tmp_path) -> None:
    with pytest.raises(ConfigError, match="nope.jsonl"):
        list(HumanEvalDomain(path=tmp_path / "nope.jsonl").tasks("test"))


@pytest.mark.slow
def test_all_canonical_solutions_score_one_and_return_none_scores_zero(
        domain: HumanEvalDomain) -> None:
    start = time.perf_counter()
    tasks = list(domain.tasks("test"))
    canonical = [domain.score(t, t.reference) for t in tasks]
    none = [domain.score(t, "    return None\n") for t in tasks]
    assert [t.id for t, s in zip(tasks, canonical, strict=True) if s.reward != 1.0] == []
    assert [t.id for t, s in zip(tasks, none, strict=True) if s.reward != 0.0] == []
    assert all(s.passed for s in canonical) and not any(s.passed for s in none)
    assert time.perf_counter() - start < 60


def test_an_assert_that_names_no_candidate_is_no_test(domain: HumanEvalDomain) -> None:
    """HumanEval's ``assert True`` lines (48 on 36 tasks) counted as tests and passed for
    any candidate: a body that only raises earned 1/9-2/9 of ``tests_passed`` (reward
    0.06-0.11 with ``partial_credit=1``); now only statements that assert and name the
    candidate are tests, and the canonical solutions still pass every one."""
    partial = HumanEvalDomain(partial_credit=1.0)
    tasks = {t.id: t for t in domain.tasks("test")}
    for tid in ("HumanEval/64", "HumanEval/66", "HumanEval/68"):
        task = tasks[tid]
        assert "assert True" in task.metadata["test_module"]
        score = partial.score(task, "    raise NotImplementedError\n")
        assert score.components["tests_passed"] == 0.0 and score.reward == 0.0, (tid, score)
        assert partial.score(task, task.reference).reward == 1.0, tid
