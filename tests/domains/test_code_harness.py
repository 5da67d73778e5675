"""Tests run in the real sandbox (fork server): hand-computed rewards of tricky candidates."""

from __future__ import annotations

import pytest

from polyrl.domains.code.gen import CodeGenDomain
from polyrl.domains.code.harness import run_tests
from polyrl.domains.code.runner import decode, encode, outputs_equal
from polyrl.types import Task


def _task(timeout_s: float = 1.0) -> Task:
    """f(x) = 3x on x = 1, 2, 0, -1, continuing ``def f(x):\\n``."""
    cases = [[encode((x,)), encode(3 * x)] for x in (1, 2, 0, -1)]
    return Task(id="t", domain="code/gen-v1", split="test", difficulty=1,
                prompt=[{"role": "user", "content": "f"}], reference="    return x * 3\n",
                metadata={"prompt_code": "def f(x):\n", "entry_point": "f", "kind": "io",
                          "cases": cases, "n_tests": 4, "per_test_timeout_s": timeout_s})


DOMAIN = CodeGenDomain()


def test_codec_round_trips_python_values() -> None:
    value = {(1, 2): [{3, 4}, frozenset({5})], "c": 1 + 2j, "b": b"\x00", "f": float("inf")}
    assert decode(encode(value)) == value
    assert outputs_equal([0.1 + 0.2], [0.3], 0.0) and not outputs_equal((1,), [1], 0.0)


def test_oracle_scores_one() -> None:
    score = DOMAIN.score(_task(), "    return x * 3\n")
    assert score.reward == pytest.approx(1.0) and score.passed


def test_wrong_but_close_answer_gets_dense_partial_credit() -> None:
    # only x=0 passes: tests 1/4; closeness (0.8 + 7/9 + 1 + 0.8) / 4
    score = DOMAIN.score(_task(), "    return x * 2\n")
    closeness = (0.8 + 7 / 9 + 1 + 0.8) / 4
    assert score.components["tests_passed"] == pytest.approx(0.25)
    assert score.components["output_closeness"] == pytest.approx(closeness)
    assert score.reward == pytest.approx(0.8 * 0.25 + 0.1 + 0.1 * closeness)
    assert score.passed is False


def test_code_that_prints_instead_of_returning_fails_every_test() -> None:
    score = DOMAIN.score(_task(), "    print(x * 3)\n")
    assert score.components["tests_passed"] == 0.0 and score.components["compiled"] == 1.0
    assert score.reward == pytest.approx(0.1)


def test_code_that_times_out_on_one_input_loses_only_that_test() -> None:
    score = DOMAIN.score(_task(timeout_s=0.5), "    while x == 2:\n        pass\n    return 3 * x\n")
    assert score.components["tests_passed"] == pytest.approx(0.75)
    assert score.reward == pytest.approx(0.8 * 0.75 + 0.1 + 0.1 * 0.75)


def test_module_that_never_finishes_does_not_compile() -> None:
    score = DOMAIN.score(_task(timeout_s=0.5), "```python\nwhile True:\n    pass\n```")
    assert score.components["compiled"] == 0.0 and score.reward == 0.0


def test_syntax_error_and_empty_answer_score_zero() -> None:
    assert DOMAIN.score(_task(), "    return (x *\n").reward == 0.0
    assert DOMAIN.score(_task(), "").reward == 0.0


def test_exit_and_hard_exit_cannot_fake_a_pass() -> None:
    exit_score = DOMAIN.score(_task(), "    raise SystemExit(0)\n")
    assert exit_score.components["tests_passed"] == 0.0
    hard = DOMAIN.score(_task(), "    import os\n    os._exit(0)\n")
    assert hard.components["tests_passed"] == 0.0 and hard.reward == pytest.approx(0.1)


def test_statement_tests_count_each_assert_and_share_the_solution_namespace() -> None:
    test = ("def check(candidate):\n    assert candidate(1) == 2\n    k = 3\n"
            "    assert candidate(k) == helper(k)\n    assert candidate(0) == 1\n")
    report = run_tests("def helper(x):\n    return x + 1\ndef f(x):\n    return x + 1\n",
                       entry_point="f", kind="statements", n_tests=3, test_module=test)
    assert report.passed == [True, True, True]
    report = run_tests("def helper(x):\n    return 0\ndef f(x):\n    return x + 1\n",
                       entry_point="f", kind="statements", n_tests=3, test_module=test)
    assert report.passed == [True, False, True] and report.fraction == pytest.approx(2 / 3)


def test_a_broken_sandbox_raises_instead_of_scoring_zero(monkeypatch) -> None:
    from polyrl.domains.code import harness
    from polyrl.errors import SandboxError
    from polyrl.sandbox import ForkServer

    closed = ForkServer(preload=[], limits="default",
                        programs={harness.RUNNER: harness.RUNNER_SOURCE})
    closed.close()
    monkeypatch.setitem(harness._servers, 0, closed)
    with pytest.raises(SandboxError):
        DOMAIN.score(_task(), "    return x * 3\n")
    score = DOMAIN.safe_score(_task(), "    return x * 3\n")
    assert score.error == "SandboxError" and not score.ok
