"""The shell episode (polyrl.domains.terminal.env) in a real sandbox session."""

from __future__ import annotations

from pathlib import Path

import pytest

from polyrl.domains.checker import run_actions
from polyrl.domains.terminal.domain import TbenchDomain
from polyrl.domains.terminal.env import grade_output, parse_action
from polyrl.types import ExecResult


def test_parse_action_forms() -> None:
    assert parse_action("ls -la") == "ls -la"
    assert parse_action("I'll list.\n```bash\nls\n```") == "ls"
    assert parse_action('{"name": "bash", "arguments": {"command": "pwd"}}') == "pwd"
    for done in ("done", " DONE ", "<done>", "exit"):
        assert parse_action(done) is None


def test_grade_output_pytest_tap_and_exit_code() -> None:
    def res(out: str, code: int = 0) -> ExecResult:
        return ExecResult(argv=[], exit_code=code, stdout=out)

    assert grade_output(res("==== 3 passed, 1 failed in 0.1s ====", 1)) == (0.75, 3, 4)
    assert grade_output(res("1 failed, 1 passed, 2 errors", 1)) == (0.25, 1, 4)
    assert grade_output(res("ok 1 - a\nnot ok 2 - b\nok 3 - c\n")) == (2 / 3, 2, 3)
    assert grade_output(res("", 0)) == (1.0, 1, 1)
    assert grade_output(res("", 2)) == (0.0, 0, 1)


def _tbench(root: Path) -> Path:
    d = root / "count-words"
    (d / "tests").mkdir(parents=True)
    (d / "task.yaml").write_text(
        "instruction: Write the number of words in text.txt to n.txt and copy text.txt to "
        "backup/text.txt.\ndifficulty: medium\ncategory: text\n")
    (d / "setup.sh").write_text("echo one two three > /workspace/text.txt\n")
    (d / "solution.sh").write_text("wc -w < text.txt > n.txt\nmkdir -p backup\n"
                                   "cp text.txt backup/\n")
    (d / "tests" / "test_outputs.py").write_text(
        "from pathlib import Path\nW = Path('/workspace')\n\n"
        "def test_count():\n    assert (W / 'n.txt').read_text().strip() == '3'\n\n"
        "def test_backup():\n    assert (W / 'backup/text.txt').read_text() == 'one two three\\n'\n")
    return root


def test_pytest_task_full_partial_and_empty(tmp_path: Path) -> None:
    domain = TbenchDomain(_tbench(tmp_path))
    task = next(domain.tasks("test"))
    oracle = run_actions(domain.env(task), domain.oracle_actions(task))
    assert oracle.reward == 1.0 and oracle.info["last_info"]["score"].passed
    assert run_actions(domain.env(task), ["done"]).reward == 0.0
    ep = run_actions(domain.env(task), ["cd /tmp", "cd /workspace && wc -w < text.txt > n.txt",
                                        "done"])
    assert ep.reward == 0.5 and ep.terminated
    score = ep.info["last_info"]["score"]
    assert score.components["tests_passed"] == 1 and score.components["tests_total"] == 2
    assert score.passed is False


def test_turn_budget_truncates(tmp_path: Path) -> None:
    domain = TbenchDomain(_tbench(tmp_path))
    task = next(domain.tasks("test"))
    task.metadata["max_turns"] = 2
    with domain.env(task) as env:
        env.reset()
        obs, reward, term, trunc, _ = env.step("echo hi")
        assert "[exit code 0]" in obs and "hi" in obs and not (term or trunc)
        obs, reward, term, trunc, info = env.step("false")
        assert trunc and not term and reward == 0.0 and "[exit code 1]" in obs
        with pytest.raises(RuntimeError):
            env.step("ls")


def test_planted_conftest_cannot_fake_a_pass(tmp_path: Path) -> None:
    domain = TbenchDomain(_tbench(tmp_path))
    task = next(domain.tasks("test"))
    plant = ("cat > conftest.py <<'EOF'\nimport pytest\n@pytest.hookimpl(hookwrapper=True)\n"
             "def pytest_runtest_makereport(item, call):\n    out = yield\n"
             "    out.get_result().outcome = 'passed'\nEOF\n"
             "printf '[pytest]\\naddopts = --co\\n' > pytest.ini\n"
             "mkdir -p .polyrl_tests && echo 'def test_x(): pass' > .polyrl_tests/test_fake.py")
    ep = run_actions(domain.env(task), [plant, "done"])
    assert ep.reward == 0.0
