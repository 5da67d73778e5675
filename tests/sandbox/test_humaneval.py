"""Real input: the 164 HumanEval problems judged inside the sandbox."""

from __future__ import annotations

import pytest

from polyrl.sandbox import ForkServer, Limits, Sandbox
from polyrl.sandbox.humaneval_checks import WRONG_BODY, check_program, load_problems

LIM = Limits(timeout_s=20, cpu_s=10)


def test_five_problems_through_fresh_bwrap_interpreters(sb: Sandbox):
    for p in load_problems()[:5]:
        good = sb.run_python(check_program(p), limits=LIM)
        bad = sb.run_python(check_program(p, WRONG_BODY), limits=LIM)
        assert good.exit_code == 0, (p["task_id"], good.stderr[-500:])
        assert bad.exit_code != 0 and bad.error is None, p["task_id"]


@pytest.mark.slow
def test_all_164_canonical_pass_and_wrong_fail(fs: ForkServer):
    from polyrl.sandbox import SandboxPool

    problems = load_problems()
    assert len(problems) == 164
    with SandboxPool(workers=fs.workers) as pool:
        good = pool.map(lambda p: fs.run_python(check_program(p), limits=LIM), problems)
        bad = pool.map(lambda p: fs.run_python(check_program(p, WRONG_BODY), limits=LIM),
                       problems)
    failed = [(p["task_id"], r.stderr[-300:])
              for p, r in zip(problems, good, strict=True) if r.exit_code != 0]
    assert failed == []
    passed_wrong = [p["task_id"] for p, r in zip(problems, bad, strict=True) if r.exit_code == 0]
    assert passed_wrong == []
    assert all(r.error is None for r in good + bad)
