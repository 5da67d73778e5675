"""The shell episode: one command per turn in a sandbox session, then the task's tests.

Actions (``parse_action``): a shell command (plain text or the last fenced
```` ```bash ```` block), an OpenAI-style tool call ``{"name": "bash", "arguments":
{"command": "..."}}``, or the done action ``done``. Observations show the exit code
and the tail of stdout/stderr (``MAX_OBS_CHARS`` each). The episode ends on ``done``
(terminated), or when ``max_turns`` commands or ``agent_timeout_s`` seconds of
command wall time are used (truncated). Then the tests are copied to
``/workspace/.polyrl_tests`` and run; reward = tests passed / tests reported
(pytest summary or TAP ``ok``/``not ok`` lines), or exit status 0/1 when they report
no counts. ``info["score"]`` holds the final ``Score``.
"""

from __future__ import annotations

import json
import re
import threading
from typing import Any

from polyrl.domains.base import Env
from polyrl.domains.extract import extract_code_blocks
from polyrl.errors import GraderError, SandboxError
from polyrl.types import ExecResult, Score, Task

DONE = "done"
MAX_OBS_CHARS = 2000
STEP_TIMEOUT_S = 30.0
TEST_DIR = "/workspace/.polyrl_tests"
_LOCK = threading.Lock()
_SANDBOX: Any = None
_PYTEST_RE = re.compile(r"(\d+) (passed|failed|error|errors)\b")
_TAP_RE = re.compile(r"^(not ok|ok)\b", re.M)


def default_sandbox() -> Any:
    """The process-wide ``polyrl.sandbox.Sandbox`` (created on first use)."""
    global _SANDBOX
    with _LOCK:
        if _SANDBOX is None:
            from polyrl.sandbox import Sandbox

            _SANDBOX = Sandbox(limits="default")
        return _SANDBOX


def parse_action(action: str) -> str | None:
    """The command in ``action``, or None for the done action (see module docstring)."""
    text = action.strip()
    if text.lower().strip("<>/`. ") in (DONE, "exit", ""):
        return None
    if text.startswith("{"):
        try:
            obj = json.loads(text)
            args = obj.get("arguments", {}) if isinstance(obj, dict) else {}
            if isinstance(args, str):
                args = json.loads(args)
            if isinstance(args, dict) and isinstance(args.get("command"), str):
                return args["command"]
            if isinstance(obj, dict) and obj.get("name") == DONE:
                return None
        except json.JSONDecodeError:
            pass
    blocks = extract_code_blocks(text)
    if blocks:
        return blocks[-1].code
    return text


def _tail(s: str, n: int = MAX_OBS_CHARS) -> str:
    return s if len(s) <= n else "...[truncated]\n" + s[-n:]


def format_observation(res: ExecResult) -> str:
    """What the policy sees after a command."""
    head = f"[exit code {res.exit_code}]" if res.limit_hit is None else \
        f"[killed: {res.limit_hit}]"
    parts = [head]
    if res.stdout:
        parts.append(_tail(res.stdout))
    if res.stderr:
        parts.append("[stderr]\n" + _tail(res.stderr))
    return "\n".join(parts)


def test_command(task: Task) -> str:
    """The shell command that runs the task's tests (cwd /workspace)."""
    meta = task.metadata
    if meta.get("run_tests"):
        return f"TEST_DIR={TEST_DIR} bash {TEST_DIR}/../.polyrl_run_tests.sh"
    names = list(meta["tests"])
    if any(n.rsplit("/", 1)[-1].startswith("test_") and n.endswith(".py") for n in names):
        # -P: no cwd on sys.path; -c/--rootdir/--confcutdir: ignore any pytest.ini or
        # conftest.py the agent may have planted in /workspace
        return (f"python3 -P -m pytest -q -p no:cacheprovider -c {TEST_DIR}/.pytest.ini "
                f"--rootdir={TEST_DIR} --confcutdir={TEST_DIR} {TEST_DIR}")
    if "check.py" in names:
        return f"python3 {TEST_DIR}/check.py"
    if "check.sh" in names:
        return f"bash {TEST_DIR}/check.sh"
    raise GraderError(f"task {task.id}: tests have no test_*.py, check.py or check.sh")


def grade_output(res: ExecResult) -> tuple[float, int, int]:
    """``(fraction passed, passed, total)`` from a test run's output."""
    out = res.stdout + "\n" + res.stderr
    tap = _TAP_RE.findall(res.stdout)
    if tap:
        good = sum(1 for t in tap if t == "ok")
        return good / len(tap), good, len(tap)
    counts = {"passed": 0, "failed": 0, "error": 0}
    for n, word in _PYTEST_RE.findall(out):
        counts["error" if word.startswith("error") else word] += int(n)
    total = sum(counts.values())
    if total:
        return counts["passed"] / total, counts["passed"], total
    ok = res.exit_code == 0 and res.limit_hit is None
    return float(ok), int(ok), 1


class TerminalEnv(Env):
    """One shell task in a fresh sandbox session (see module docstring).

    Args:
        task: a terminal task (metadata from ``taskdir.load_task_dir``).
        sandbox: a ``polyrl.sandbox.Sandbox``; default the shared one.
    """

    done_action = DONE

    def __init__(self, task: Task, sandbox: Any = None) -> None:
        self.task = task
        self.sandbox = sandbox or default_sandbox()
        self.session: Any = None
        self.turns = 0
        self.used_s = 0.0
        self.finished = False

    def reset(self, *, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        """Fresh session; runs ``setup.sh``; returns the instruction.

        Raises:
            SandboxError: the sandbox failed. GraderError: the setup script failed.
        """
        self.close()
        self.session = self.sandbox.session()
        self.turns, self.used_s, self.finished = 0, 0.0, False
        setup = self.task.metadata.get("setup", "")
        if setup:
            res = self._exec(setup, self.task.metadata["test_timeout_s"])
            if not res.ok:
                raise GraderError(f"task {self.task.id}: setup.sh failed "
                                  f"(exit {res.exit_code}, {res.limit_hit}): {res.stderr[-300:]}")
        meta = self.task.metadata
        obs = (f"{meta['instruction']}\n\nYou are in /workspace in a bash shell. Send one "
               f"command per turn (at most {meta['max_turns']}); reply `{DONE}` when finished.")
        return obs, {"max_turns": meta["max_turns"]}

    def _exec(self, command: str, timeout_s: float) -> ExecResult:
        limits = self.session.limits.replace(timeout_s=timeout_s, cpu_s=timeout_s)
        res = self.session.run(command, limits=limits)
        if res.error:
            raise SandboxError(f"task {self.task.id}: {res.error}: {res.error_message}")
        return res

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Run one command (or finish on ``done``); the last step carries the reward."""
        if self.session is None or self.finished:
            raise RuntimeError("call reset() before step() (and not after the episode ended)")
        command = parse_action(action)
        if command is None:
            return self._finish(terminated=True)
        meta = self.task.metadata
        budget = min(STEP_TIMEOUT_S, meta["agent_timeout_s"] - self.used_s)
        res = self._exec(command, max(budget, 0.5))
        self.turns += 1
        self.used_s += res.wall_s
        obs = format_observation(res)
        if self.turns >= meta["max_turns"] or self.used_s >= meta["agent_timeout_s"]:
            final_obs, reward, term, trunc, info = self._finish(terminated=False)
            return obs + "\n" + final_obs, reward, term, trunc, info
        return obs, 0.0, False, False, {"exit_code": res.exit_code}

    def _finish(self, *, terminated: bool) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.finished = True
        score = self.run_tests()
        obs = f"[episode over: {score.components['tests_passed']:.0f}/" \
              f"{score.components['tests_total']:.0f} tests passed]"
        return obs, score.reward, terminated, not terminated, {"score": score}

    def run_tests(self) -> Score:
        """Copy the tests in, run them, and grade (reward = fraction passed)."""
        meta = self.task.metadata
        self._exec("rm -rf /workspace/.polyrl_tests /workspace/.polyrl_run_tests.sh", 30.0)
        self.session.write_file(".polyrl_tests/.pytest.ini", "[pytest]\n")
        for rel, content in meta["tests"].items():
            self.session.write_file(f".polyrl_tests/{rel}", content)
        if meta.get("run_tests"):
            self.session.write_file(".polyrl_run_tests.sh", meta["run_tests"])
        cmd = f"cd /workspace && {test_command(self.task)}"
        res = self._exec(cmd, meta["test_timeout_s"])
        frac, good, total = grade_output(res)
        return Score(
            reward=frac,
            components={"tests_fraction": frac, "tests_passed": float(good),
                        "tests_total": float(total), "turns": float(self.turns)},
            passed=good == total and total > 0,
        )

    def close(self) -> None:
        """Delete the sandbox session."""
        if self.session is not None:
            self.session.close()
            self.session = None
