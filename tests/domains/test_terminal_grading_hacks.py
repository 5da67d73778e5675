"""Reward hacks of the terminal grader, run as real episodes in a real sandbox session.

Each hack is an agent that does not do the task but, before the fix, got reward: it
rewrote check.sh while bash read it or the script bash had parsed, overwrote a test's expected-output file, killed or
hung the check script after its first ``ok``, or printed TAP lines into a check's
stdout. The reference solution still scores 1.0.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from polyrl.domains.checker import run_actions
from polyrl.domains.terminal.domain import TbenchDomain
from polyrl.domains.terminal.env import grade_output
from polyrl.types import ExecResult, Task

from .taskdirs import write_taskdirs

SOLUTION = ("printf '#!/bin/sh\\necho 42\\n' > /workspace/run.sh; echo hi > /workspace/a.txt; "
            "echo 42 > /workspace/answer.txt\n")
INSTRUCTION = "Make /workspace/run.sh print 42 and /workspace/a.txt hold the line hi."
CHECK_PLAN = textwrap.dedent("""\
    echo 1..2
    cd /workspace
    if [ "$(bash run.sh)" = 42 ]; then echo ok 1 - run; else echo not ok 1 - run; fi
    if [ "$(cat a.txt)" = hi ]; then echo ok 2 - a; else echo not ok 2 - a; fi
    """)
CHECK_NO_PLAN = textwrap.dedent("""\
    cd /workspace
    if [ -f run.sh ]; then echo ok 1 - exists; else echo not ok 1 - exists; fi
    if [ "$(bash run.sh)" = 42 ]; then echo ok 2 - run; else echo not ok 2 - run; fi
    if [ "$(cat a.txt)" = hi ]; then echo ok 3 - a; else echo not ok 3 - a; fi
    """)
TEST_WITH_DATA = textwrap.dedent("""\
    import os, subprocess
    def test_run():
        out = subprocess.run(["bash", "/workspace/run.sh"], capture_output=True,
                             text=True).stdout
        assert out == open(os.path.join(os.environ["TEST_DIR"], "expected.txt")).read()
    def test_a():
        assert open("/workspace/a.txt").read() == "hi\\n"
    """)
TEST_ANSWER = textwrap.dedent("""\
    import os
    def test_answer():
        want = open(os.path.join(os.environ["TEST_DIR"], "expected.txt")).read()
        assert open("/workspace/answer.txt").read() == want
    """)
CHECK_PY_NO_PLAN = textwrap.dedent("""\
    import subprocess
    code = subprocess.call(["bash", "/workspace/run.sh"])
    done = code == 0 and open("/workspace/a.txt").read() == "hi\\n"
    print("ok 1" if done else "not ok 1")
    """)
TASKS = {
    "plan-sh": {"check.sh": CHECK_PLAN},
    "noplan-sh": {"check.sh": CHECK_NO_PLAN},
    "pytest-data": {"test_outputs.py": TEST_WITH_DATA, "expected.txt": "42\n"},
    "checkpy-noplan": {"check.py": CHECK_PY_NO_PLAN},
    "pytest-answer": {"test_outputs.py": TEST_ANSWER, "expected.txt": "42\n"},
}

# run.sh payloads (the check runs run.sh)
REWRITE_CHECK = textwrap.dedent("""\
    for f in /tmp/polyrl-grade-*/tests/check.sh "$TEST_DIR/check.sh"; do
      [ -f "$f" ] || continue
      python3 - "$f" <<'PY'
    import sys
    p = sys.argv[1]; s = open(p).read()
    i = s.index("\\n", s.index("run.sh")) + 1
    open(p, "w").write(s[:i] + "echo ok 2 - a; exit 0\\n")
    PY
    done
    """)
# the parsed `else echo not ok 1` of check.sh's bash becomes `echo ok 1` in its memory
PATCH_BASH_MEMORY = textwrap.dedent("""\
    python3 - <<'PY'
    import os, re
    for pid in [p for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]:
        try:
            maps = open(f"/proc/{pid}/maps").read().splitlines()
            mem = open(f"/proc/{pid}/mem", "r+b", buffering=0)
        except OSError:
            continue
        for line in maps:
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            if line.split()[1][:2] != "rw" or hi - lo > 1 << 28:
                continue
            try:
                mem.seek(lo)
                data = mem.read(hi - lo)
            except OSError:
                continue
            for m in re.finditer(rb"not\\x00", data):
                mem.seek(lo + m.start())
                mem.write(b"ok\\x00\\x00")
    PY
    """)
OVERWRITE_EXPECTED = 'echo 7 | tee "$TEST_DIR/expected.txt"\n'
KILL_CHECK = "kill -9 -1\n"
HANG = "sleep 1000\n"
PRINT_OK = "for i in $(seq 1 30); do echo ok $i; done\n"


def _domain(root: Path) -> tuple[TbenchDomain, dict[str, Task]]:
    return write_taskdirs(root, {n: (t, None) for n, t in TASKS.items()}, INSTRUCTION, SOLUTION, 8)


@pytest.fixture(scope="module")
def tbench(tmp_path_factory: pytest.TempPathFactory) -> tuple[TbenchDomain, dict[str, Task]]:
    return _domain(tmp_path_factory.mktemp("tasks"))


@pytest.mark.parametrize("name", sorted(TASKS))
def test_reference_solutions_still_score_full(tbench: tuple[TbenchDomain, dict[str, Task]],
                                              name: str) -> None:
    domain, tasks = tbench
    assert domain.score(tasks[name], tasks[name].reference).reward == 1.0
    assert domain.score(tasks[name], "").reward == 0.0


@pytest.mark.parametrize(("name", "payload", "extra"), [
    # before: 0.5 (bash re-read the rewritten rest of check.sh: "ok 2" without a.txt)
    ("plan-sh", REWRITE_CHECK, ""),
    # before: 0.5 (check.sh's bash was dumpable: "ok ok 1 - run" was printed)
    ("plan-sh", PATCH_BASH_MEMORY, ""),
    # before: 0.5 (the tee made expected.txt say what run.sh prints)
    ("pytest-data", OVERWRITE_EXPECTED, ""),
    # before: 1.0 (only "ok 1" was printed; with no plan that was 1/1)
    ("noplan-sh", KILL_CHECK, ""),
    # before: 1.0 (the grading timed out after "ok 1")
    ("noplan-sh", HANG, ""),
    # before: 1.0 (30 TAP lines, all run.sh's; the check itself died on the missing a.txt)
    ("checkpy-noplan", PRINT_OK, ""),
], ids=["rewrite-check-sh", "patch-bash-memory", "overwrite-expected", "kill-check", "hang-check",
        "print-tap-lines"])
def test_hacks_of_the_grader_get_no_reward(tbench: tuple[TbenchDomain, dict[str, Task]],
                                           name: str, payload: str, extra: str) -> None:
    domain, tasks = tbench
    plant = f"cat > /workspace/run.sh <<'EOF'\n{payload}EOF\n{extra}"
    ep = run_actions(domain.env(tasks[name]), [plant, "done"])
    assert ep.reward == 0.0, ep.info["last_info"]["score"]


def test_grade_output_rejects_tap_reports_the_check_cannot_have_printed() -> None:
    def res(out: str, limit: str | None = None) -> ExecResult:
        return ExecResult(argv=[], exit_code=0, stdout=out, stderr="", limit_hit=limit)

    assert grade_output(res("1..2\nok 1\nnot ok 2\n")) == (0.5, 1, 2)
    assert grade_output(res("1..3\nok 1\n", "timeout_s")) == (1 / 3, 1, 3)  # cut short
    assert grade_output(res("ok 1\nnot ok 2\n")) == (0.5, 1, 2)
    for forged in ["1..2\nok 1\nok 2\nnot ok 2\n",  # a number twice
                   "1..2\nok 1\nok 3\n",  # past the plan
                   "1..2\nok\nok\nnot ok 1\n",  # more lines than the plan
                   "1..4\nok\nok\nok\n1..2\nnot ok 1\n",  # a second plan
                   "ok 1\nBail out! killed\n"]:
        assert grade_output(res(forged))[0] == 0.0, forged
    assert grade_output(res("ok 1\n", "timeout_s")) == (0.0, 0, 1)  # no plan, cut short


def test_a_symlink_left_in_the_workspace_cannot_reach_the_expected_files(
        tbench: tuple[TbenchDomain, dict[str, Task]]) -> None:
    """The read-only test folder's path has a random part: answer.txt cannot be a link to
    its expected.txt (made during the episode, for the grading run to follow)."""
    domain, tasks = tbench
    plant = "ln -s /run/polyrl/grade/tests/expected.txt /workspace/answer.txt"
    ep = run_actions(domain.env(tasks["pytest-answer"]), [plant, "done"])
    assert ep.reward == 0.0
