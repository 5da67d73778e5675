"""The shell episode (polyrl.domains.terminal.env) in a real sandbox session."""

from __future__ import annotations

from pathlib import Path

import pytest

from polyrl.domains.checker import run_actions
from polyrl.domains.terminal.domain import TbenchDomain, TerminalGenDomain
from polyrl.domains.terminal.env import grade_output, parse_action
from polyrl.types import Episode, ExecResult, Task, Turn


def test_parse_action_forms() -> None:
    assert parse_action("ls -la") == "ls -la"
    assert parse_action("I'll list.\n```bash\nls\n```") == "ls"
    assert parse_action('{"name": "bash", "arguments": {"command": "pwd"}}') == "pwd"
    for done in ("done", " DONE ", "<done>", "exit"):
        assert parse_action(done) is None


def test_grade_output_pytest_summary_tap_and_no_exit_code_fallback() -> None:
    def res(out: str, code: int = 0, err: str = "") -> ExecResult:
        return ExecResult(argv=[], exit_code=code, stdout=out, stderr=err)

    assert grade_output(res("F.\n==== 3 passed, 1 failed in 0.1s ====", 1), "pytest") == \
        (0.75, 3, 4)
    assert grade_output(res("1 failed, 1 passed, 2 errors in 2.50s", 1), "pytest") == \
        (0.25, 1, 4)
    assert grade_output(res("ok 1 - a\nnot ok 2 - b\nok 3 - c\n")) == (2 / 3, 2, 3)
    # a plan counts the tests a report cut short never reached
    assert grade_output(res("1..4\nok 1 - a\nok 2 - b\n")) == (0.5, 2, 4)
    assert grade_output(res("1..0\n")) == (0.0, 0, 0)
    # silence (or an exit status alone) never scores
    assert grade_output(res("", 0)) == (0.0, 0, 0)
    assert grade_output(res("", 0), "pytest") == (0.0, 0, 0)
    assert grade_output(res("", 0), "run-tests.sh") == (0.0, 0, 0)
    # pytest counts come only from the final summary line, never from quoted output
    quoted = "E   AssertionError: assert '999 passed' == '3'\n==== 1 failed in 0.1s ===="
    assert grade_output(res(quoted, 1), "pytest") == (0.0, 0, 1)
    assert grade_output(res("==== 1 failed in 0.1s ====\n999 passed", 1), "pytest") == \
        (0.0, 0, 0)
    assert grade_output(res("", 1, err="5 passed in 0.1s"), "pytest") == (0.0, 0, 0)
    assert grade_output(res("setup\n2 passed in 0.3s\ndone\n"), "run-tests.sh") == \
        (1.0, 2, 2)


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


def test_pytest_counts_ignore_quoted_agent_output(tmp_path: Path) -> None:
    """A file whose content reads like a pytest summary is quoted in the failure report."""
    domain = TbenchDomain(_tbench(tmp_path))
    task = next(domain.tasks("test"))
    ep = run_actions(domain.env(task), ["echo '999 passed' > n.txt", "done"])
    assert ep.reward == 0.0
    assert ep.info["last_info"]["score"].components["tests_total"] == 2


# ---------------------------------------------------------- generated tasks (check.py)
def _gen_task(tmp_path: Path, category: str) -> tuple[TerminalGenDomain, Task]:
    domain = TerminalGenDomain(cache_dir=tmp_path)
    task = next(t for t in domain.tasks("test", n=7, difficulty=5)
                if t.metadata["category"] == category)
    return domain, task


@pytest.mark.parametrize("category", ["git", "debug"])
def test_planted_test_folder_cannot_fake_a_pass(tmp_path: Path, category: str) -> None:
    """A read-only .polyrl_tests with a glob.py that prints TAP and exits 0 silently."""
    domain, task = _gen_task(tmp_path, category)
    plant = ("mkdir -p .polyrl_tests && printf 'import os\\nfor i in range(1, 6): "
             "print(\"ok\", i, \"- x\")\\nos._exit(0)\\n' > .polyrl_tests/glob.py && "
             "cp .polyrl_tests/glob.py glob.py && chmod 555 .polyrl_tests")
    score = domain.score(task, Episode(task_id=task.id, turns=[Turn("assistant", plant)]))
    assert score.reward == 0.0 and not score.passed
    assert score.components["tests_total"] == 5  # the real check ran
    assert domain.score(task, task.reference).reward == 1.0
    assert domain.score(task, "").reward == 0.0


def test_agent_code_cannot_patch_the_grader_memory(tmp_path: Path) -> None:
    """stats.py (run by the debug checks) rewrites 'not ok' in every /proc/<pid>/mem."""
    domain, task = _gen_task(tmp_path, "debug")
    payload = (
        "import os, re\n"
        "for pid in [p for p in os.listdir('/proc') if p.isdigit() and int(p) != os.getpid()]:\n"
        "    try:\n"
        "        maps = open(f'/proc/{pid}/maps').read().splitlines()\n"
        "        mem = open(f'/proc/{pid}/mem', 'r+b', buffering=0)\n"
        "    except OSError:\n"
        "        continue\n"
        "    for line in maps:\n"
        "        lo, hi = (int(x, 16) for x in line.split()[0].split('-'))\n"
        "        if line.split()[1][:2] != 'rw' or hi - lo > 1 << 28:\n"
        "            continue\n"
        "        try:\n"
        "            mem.seek(lo)\n"
        "            data = mem.read(hi - lo)\n"
        "        except OSError:\n"
        "            continue\n"
        "        for m in re.finditer(rb'not ok', data):\n"
        "            mem.seek(lo + m.start())\n"
        "            mem.write(b'ok    ')\n")
    plant = f"cat > stats.py <<'EOF'\n{payload}EOF"
    ep = run_actions(domain.env(task), [plant, "done"])
    assert ep.reward == 0.0


def test_agent_code_run_by_the_check_cannot_kill_the_grader(tmp_path: Path) -> None:
    """stats.py (run by the debug checks) SIGKILLs every process it can: the grader, pid
    1 of its namespace, lives on and reports every check (under the cold init it was pid
    2: killed, and a check that flushed its TAP lines would have had only those counted)."""
    domain, task = _gen_task(tmp_path, "debug")
    payload = "import os, signal\nos.kill(-1, signal.SIGKILL)\n"
    with domain.env(task) as env:
        env.reset()
        env.step(f"cat > stats.py <<'EOF'\n{payload}EOF")
        env.step("done")
        score = env.run_tests()
    assert score.components["tests_total"] == 5 and score.reward < 1.0, score


def test_git_config_of_the_workspace_runs_nothing_while_grading(tmp_path: Path) -> None:
    """core.fsmonitor, a textconv and a clean filter set by the agent leave no trace."""
    domain, task = _gen_task(tmp_path, "git")
    plant = ("for h in fsm tc cl; do printf '#!/bin/sh\\ntouch /workspace/MARK.%s\\ncat \"$@\"\\n' "
             "$h > $h.sh; chmod +x $h.sh; done\n"
             "git -C repo config core.fsmonitor /workspace/fsm.sh\n"
             "git -C repo config diff.ev.textconv /workspace/tc.sh\n"
             "git -C repo config filter.fi.clean /workspace/cl.sh\n"
             "echo '* diff=ev filter=fi' > repo/.git/info/attributes\n"
             "touch repo/app.txt; sleep 1.1; touch repo/app.txt")
    with domain.env(task) as env:
        env.reset()
        env.step(task.reference)
        env.step(plant)
        _, reward, term, _, _ = env.step("done")
        marks = sorted(p.name for p in Path(env.session.workspace.path).glob("MARK.*"))
    assert term and reward == 1.0  # drivers became `cat`: the repository still reads right
    assert marks == []


def test_agent_code_run_by_the_check_cannot_read_its_expected_values(tmp_path: Path) -> None:
    """stats.py prints the literals of the check file it finds ($TEST_DIR or /tmp)."""
    domain, task = _gen_task(tmp_path, "debug")
    payload = (
        "import glob, os, re\n"
        "paths = glob.glob(os.environ.get('TEST_DIR', '/nonexistent') + '/**', recursive=True)\n"
        "paths += glob.glob('/tmp/**/check.py', recursive=True)\n"
        "for p in paths:\n"
        "    try:\n"
        "        src = open(p).read()\n"
        "    except OSError:\n"
        "        continue\n"
        "    for lit in re.findall(r\"'([a-z_]+=[^']*)' in sh\", src):\n"
        "        print(lit)\n")
    ep = run_actions(domain.env(task), [f"cat > stats.py <<'EOF'\n{payload}EOF", "done"])
    assert ep.reward == 0.0


@pytest.mark.parametrize("hide", ["gitdir_in_place", "unlistable_folder"])
def test_git_config_of_a_repository_the_walk_cannot_see_runs_nothing(tmp_path: Path,
                                                                     hide: str) -> None:
    """A clean filter in a repository git finds but the grader's walk did not: repo/
    turned into a git directory itself (no .git), or moved into a folder the grader
    cannot list (mode 111) behind a symlink. Before: the filter ran inside the grader."""
    domain, task = _gen_task(tmp_path, "git")
    move = {"gitdir_in_place": "cd repo && mv .git/* . && rmdir .git && git config core.bare "
                               "false && git config core.worktree . && cd ..",
            "unlistable_folder": "mkdir hid && mv repo hid/ && ln -s hid/repo repo"}[hide]
    info = "repo/info" if hide == "gitdir_in_place" else "repo/.git/info"
    plant = (f"{move}\nprintf '#!/bin/sh\\ntouch /workspace/MARK\\ncat\\n' > cl.sh; chmod +x cl.sh\n"
             "git -C repo config filter.fi.clean /workspace/cl.sh\n"
             f"echo '* filter=fi' > {info}/attributes\n"
             "touch repo/app.txt; sleep 1.1; touch repo/app.txt; rm -f MARK\n"
             + ("chmod 111 hid" if hide == "unlistable_folder" else ""))
    with domain.env(task) as env:
        env.reset()
        env.step(task.reference)
        env.step(plant)
        _, reward, term, _, _ = env.step("done")
        marked = (Path(env.session.workspace.path) / "MARK").exists()
    assert term and not marked
    if hide == "unlistable_folder":  # what the grader cannot check fails the grading
        assert reward == 0.0


def test_parse_action_survives_deeply_nested_json() -> None:
    deep = '{"name": "bash", "arguments": "' + "[" * 100_000 + '"}'
    assert parse_action(deep) == deep
    from polyrl.rollout.agent import parse_tool_call
    assert parse_tool_call(deep) is None


@pytest.mark.parametrize("command", ["echo a\0b", "echo \ud800", "echo " + "x" * 200_000])
def test_commands_no_shell_can_take_are_a_turn_not_a_crash(tmp_path: Path,
                                                          command: str) -> None:
    """Before: ValueError (NUL), UnicodeEncodeError (lone surrogate), SandboxError (E2BIG:
    an infrastructure error, so the episode was dropped from training)."""
    domain, task = _gen_task(tmp_path, "debug")
    task.metadata["max_turns"] = 2
    with domain.env(task) as env:
        env.reset()
        obs, reward, term, trunc, _ = env.step(command)
        assert obs.startswith("[not run: ") and not (term or trunc) and env.turns == 1
        obs, reward, term, trunc, info = env.step(command)
        assert trunc and reward == 0.0 and "score" in info
