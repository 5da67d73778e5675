"""Reward hacks of the terminal grader's pytest reports (taskdir tasks), run as real
episodes in a real sandbox session.

Each hack is an agent that does not do the task but, before the fix, got reward: its
code, imported by the task's tests, skipped or xfailed the tests it could not pass
(pytest left them out of the total), or a planted ``/workspace`` module
(``pytest/``, a stdlib name, a ``*.dist-info`` pytest plugin) ran in place of the
``python3 -m pytest`` of a ``run-tests.sh`` and printed a summary. The reference
solutions still score 1.0.
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

INSTRUCTION = "Write /workspace/solution.py with add(a, b) and mul(a, b)."
SOLUTION = textwrap.dedent("""\
    cat > /workspace/solution.py <<'EOF'
    def add(a, b):
        return a + b
    def mul(a, b):
        return a * b
    EOF
    """)
TESTS = textwrap.dedent("""\
    from solution import add, mul
    def test_add():
        assert add(2, 3) == 5
    def test_mul():
        assert mul(2, 3) == 6
    """)
# pytest mode runs in the grader (python3 -I): a test imports /workspace code explicitly
TESTS_PATH = "import sys\nsys.path.insert(0, '/workspace')\n" + TESTS
# a run-tests.sh relying on what plain python3 puts first on sys.path: the cwd (-c, -m)
# or the script's folder ($TEST_DIR/prep.py imports its neighbour helper.py)
RUN_TESTS = textwrap.dedent("""\
    cd /workspace
    python3 "$TEST_DIR/prep.py" || exit 1
    python3 -c 'import solution' || exit 1
    python3 -m pytest -q -p no:cacheprovider "$TEST_DIR/test_outputs.py"
    """)
TASKS = {
    "pytest-import": ({"test_outputs.py": TESTS_PATH}, ""),
    "runtests-m": ({"test_outputs.py": TESTS, "prep.py": "import helper\nhelper.check()\n",
                    "helper.py": "def check():\n    pass\n"}, RUN_TESTS),
}


def _solution(mul_body: str) -> str:
    """solution.py with a right add and ``mul_body`` as mul's body."""
    return (f"cat > /workspace/solution.py <<'EOF'\nimport pytest\ndef add(a, b):\n"
            f"    return a + b\ndef mul(a, b):\n    {mul_body}\nEOF\n")


SKIP = _solution("pytest.skip('not supported here')")
SKIP_EXCEPTION = _solution("raise pytest.skip.Exception('n/a')")
XFAIL = _solution("pytest.xfail('known bug')")
HALF = _solution("return 0")  # the honest half solution: 1 of 2
SUMMARY = "print('2 passed in 0.01s', flush=True); import os; os._exit(0)\n"
WRONG = _solution("return 0").replace("a + b", "0")  # imports, passes nothing
# a pytest package in the cwd, run by `python3 -m pytest` in place of the real one
FAKE_PYTEST = WRONG + ("mkdir -p /workspace/pytest && cd /workspace/pytest && touch __init__.py && "
               f"cat > __main__.py <<'EOF'\n{SUMMARY}EOF\n")
# a stdlib name that pytest imports after start-up (argparse) shadowed from the cwd
FAKE_STDLIB = WRONG + f"cat > /workspace/argparse.py <<'EOF'\n{SUMMARY}EOF\n"
# a distribution in the cwd with a pytest11 entry point: pytest autoloads it
FAKE_PLUGIN = WRONG + ("mkdir -p /workspace/evil-1.0.dist-info && cd /workspace/evil-1.0.dist-info && "
               "printf 'Metadata-Version: 2.1\\nName: evil\\nVersion: 1.0\\n' > METADATA && "
               "printf '[pytest11]\\nevil = evilplug\\n' > entry_points.txt && "
               f"cat > /workspace/evilplug.py <<'EOF'\n{SUMMARY}EOF\n")


def _domain(root: Path) -> tuple[TbenchDomain, dict[str, Task]]:
    return write_taskdirs(root, TASKS, INSTRUCTION, SOLUTION, 20)


@pytest.fixture(scope="module")
def tbench(tmp_path_factory: pytest.TempPathFactory) -> tuple[TbenchDomain, dict[str, Task]]:
    return _domain(tmp_path_factory.mktemp("tasks"))


@pytest.mark.parametrize("name", sorted(TASKS))
def test_reference_solutions_still_score_full(tbench: tuple[TbenchDomain, dict[str, Task]],
                                              name: str) -> None:
    domain, tasks = tbench
    assert domain.score(tasks[name], tasks[name].reference).reward == 1.0
    assert domain.score(tasks[name], HALF).reward == 0.5
    assert domain.score(tasks[name], "").reward == 0.0


@pytest.mark.parametrize("name", sorted(TASKS))
@pytest.mark.parametrize("plant", [SKIP, SKIP_EXCEPTION, XFAIL], ids=["skip", "skip-exc", "xfail"])
def test_skipping_the_tests_it_cannot_pass_scores_them_as_failed(
        tbench: tuple[TbenchDomain, dict[str, Task]], name: str, plant: str) -> None:
    """Before: 1.0 ("1 passed, 1 skipped" / "1 xfailed" was 1 of 1); now 0.5, as HALF."""
    domain, tasks = tbench
    ep = run_actions(domain.env(tasks[name]), [plant, "done"])
    assert ep.reward == 0.5, ep.info["last_info"]["score"]


@pytest.mark.parametrize("plant", [FAKE_PYTEST, FAKE_STDLIB, FAKE_PLUGIN],
                         ids=["pytest-package", "stdlib-name", "dist-info-plugin"])
def test_modules_planted_in_the_cwd_do_not_run_in_place_of_the_real_ones(
        tbench: tuple[TbenchDomain, dict[str, Task]], plant: str) -> None:
    """Before: 1.0 (the planted module printed "2 passed"); now the real pytest runs and
    fails both tests of the wrong solution.py."""
    domain, tasks = tbench
    ep = run_actions(domain.env(tasks["runtests-m"]), [plant, "done"])
    assert ep.reward == 0.0, ep.info["last_info"]["score"]


def test_pytest_summary_counts_every_test_that_ran() -> None:
    def res(out: str) -> ExecResult:
        return ExecResult(argv=[], exit_code=0, stdout=out, stderr="")

    line = "1 failed, 2 passed, 3 skipped, 1 xfailed, 1 xpassed, 4 deselected, 2 warnings, " \
           "1 error in 0.50s"
    assert grade_output(res(line + "\n"), "pytest") == (3 / 9, 3, 9)
    assert grade_output(res("=== 2 skipped in 0.01s ===\n"), "run-tests.sh") == (0.0, 0, 2)
    assert grade_output(res("2 passed, 2 errors in 1.00s (0:00:01)\n"), "pytest") == (0.5, 2, 4)
    assert grade_output(res("no tests ran in 0.01s\n"), "pytest") == (0.0, 0, 0)
