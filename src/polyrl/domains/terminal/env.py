"""The shell episode: one command per turn in a sandbox session, then the task's tests.

Actions (``parse_action``): a shell command (plain text or the last fenced
```` ```bash ```` block), an OpenAI-style tool call ``{"name": "bash", "arguments":
{"command": "..."}}``, or the done action ``done``. Observations show the exit code
and the tail of stdout/stderr (``MAX_OBS_CHARS`` each). The episode ends on ``done``
(terminated), or when ``max_turns`` commands or ``agent_timeout_s`` seconds of
command wall time are used (truncated). Then the tests run (``run_tests``); reward =
tests passed / tests reported, read from pytest's final summary line (``test_*.py``)
or TAP ``ok``/``not ok`` lines (``check.py``/``check.sh``); a run that reports no
counts scores 0. ``info["score"]`` holds the final ``Score``. A command no shell can be
given (a NUL byte, a lone surrogate, over ``MAX_COMMAND_BYTES``) is not run: its turn
counts and the observation says why.

Grading is built so that nothing the agent left in ``/workspace`` runs as part of the
grader (see ``GRADER``): the test files are written by the host, after the episode,
into a new host folder mounted read-only for the grading command only, at
``TESTS_MOUNT`` plus a random suffix (bwrap; the process backend: written by the grading
command into a fresh folder of its ``/tmp``), so no program a check runs can rewrite
``check.sh``, ``run-tests.sh`` or a test's expected-output file, and no link the agent
left can point at one (``/workspace/.polyrl_tests`` is just an agent file); the grader
reports through a close-on-exec descriptor (the programs it runs get ``/dev/null`` as
stdout: they cannot print TAP lines into the report); a check script that is killed, or
cut short by a limit without a TAP plan, scores 0 (``grade_output``); the grader is
``python3 -I`` (no script folder, cwd, ``PYTHON*`` variable or user site on the import
path) running as the sandbox's pid 1 (no signal from inside
kills it; every process left dies with it) and non-dumpable (agent code it runs cannot
open its ``/proc/<pid>/mem``); git runs without system/global config, hooks,
fsmonitor, pager, replace refs and with every filter/textconv/diff/merge driver of the
workspace's repositories (folders with a ``.git``, and git directories themselves, which
git uses without one) turned into ``cat`` (so agent-written git config runs nothing and
forges no git output; a folder the grader cannot list fails the grading, since a
repository in it would go unchecked); ``check.py`` runs from memory, so the agent's programs it
runs cannot read its expected values. ``check.sh`` and ``run-tests.sh`` run in
an execute-only copy of bash, which the kernel makes non-dumpable. Every ``python3`` a
check starts runs with ``PYTHONSAFEPATH`` and the shipped ``sitecustomize``
(``grade_site``): the cwd (``-c``, ``-m``) or the script's folder is searched after the
standard library and site-packages and is not on ``sys.path``, so a ``pytest/``
package, a standard-library name or a ``*.dist-info`` pytest plugin that the agent left
in ``/workspace`` does not run in place of the real one (``import solution`` still
works). A skipped or xfailed pytest test counts as not passed (``grade_output``).
Known limits (taskdir tasks only: the generated tasks are all ``check.py``): pytest,
``check.sh`` and ``run-tests.sh`` tests are files under ``$TEST_DIR`` that agent
programs they run can read (expected values in them are not secret); the programs a
check script runs (its ``pytest``) are dumpable and share the script's stdout, so agent
programs can tamper with them or print into the report (a TAP plan bounds what that
can add); a test that imports agent code runs it inside pytest (in ``"pytest"`` mode:
inside the grader, whose report descriptor is open there), where it can change any
outcome or write the report itself: such tests hold only against agents that do not
attack the grader from within.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import threading
from typing import Any

from polyrl.domains.base import Env
from polyrl.domains.extract import extract_code_blocks
from polyrl.errors import GraderError, SandboxError
from polyrl.types import ExecResult, Score, Task

DONE = "done"
MAX_OBS_CHARS = 2000
MAX_COMMAND_BYTES = 128_000
"""Longest command run (UTF-8 bytes): it travels in one environment variable, which the
kernel caps at 128 KiB (``MAX_ARG_STRLEN``); a longer one could not even start."""
STEP_TIMEOUT_S = 30.0
_LOCK = threading.Lock()
_SANDBOX: Any = None
# pytest's final summary line: "3 passed, 1 failed in 0.12s" (-q), or the same between
# "=" rules; "in 0.12s (0:00:00)" for long runs
_PYTEST_SUMMARY_RE = re.compile(
    r"^=*\s*((?:\d+ [a-z]+|no tests ran)(?:, \d+ [a-z]+)*) in \d+(?:\.\d+)?s"
    r"(?: \([0-9:]+\))?\s*=*$")
_PYTEST_COUNT_RE = re.compile(r"(\d+) ([a-z]+)")
# the outcomes of a test that ran, in pytest's summary words ("errors" read as "error")
_PYTEST_PASSED = ("passed", "xpassed")
_PYTEST_NOT_PASSED = ("failed", "error", "skipped", "xfailed")
_TAP_RE = re.compile(r"^(not ok|ok)\b[ \t]*(\d*)", re.M)
_TAP_PLAN_RE = re.compile(r"^1\.\.(\d+)\s*$", re.M)
_TAP_BAIL_RE = re.compile(r"^Bail out!", re.M)
SITE_FILE = "python/sitecustomize.py"
"""Where, in the test folder, the grader ships ``grade_site.py`` for the check's Pythons."""
TESTS_MOUNT = "/run/polyrl/grade-"
"""Where the grading command sees the host's read-only copy of the test files (bwrap),
plus 16 random hex digits: no symlink the agent left can point at an expected-output file."""

# Run as ``exec python3 -I -c "$POLYRL_GRADER"`` with a JSON spec on stdin:
# {"mode": "pytest"|"check.py"|"check.sh"|"run-tests.sh", "files": {rel: text},
#  "root": the read-only folder holding the other test files (absent: write "files"),
#  "site": SITE_FILE}.
GRADER = r"""
import ctypes, fcntl, json, os, signal, subprocess, sys, tempfile, traceback
spec = json.load(sys.stdin)
for key in [k for k in os.environ if k.startswith("POLYRL_")]:
    del os.environ[key]
ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: /proc/<pid>/mem etc. closed
signal.signal(signal.SIGINT, signal.SIG_DFL)  # pid 1 without handlers: unkillable inside
# the report goes out through a close-on-exec copy of stdout; fd 1 of every program we
# run (a check's os.system, a test's subprocess) is /dev/null, so no agent program can
# print a TAP line or summary into it (nor reach it through /proc: we are not dumpable)
report = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
null = os.open(os.devnull, os.O_RDWR)
os.dup2(null, 0)
os.dup2(null, 1)
os.close(null)
sys.stdout = open(report, "w", encoding="utf-8", errors="replace", closefd=False)
# check.py runs from memory: its expected values (literals) are never in a file that the
# agent's programs, which it runs with our uid, could read ($TEST_DIR/check.py)
check_src = spec["files"].pop("tests/check.py", None) if spec["mode"] == "check.py" else None
root = spec.get("root")  # the host's read-only mount of the test files (bwrap)
if root is None:  # the process backend: written here, where agent programs could edit them
    root = tempfile.mkdtemp(prefix="polyrl-grade-", dir="/tmp")
    for rel, text in spec["files"].items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
tests = os.path.join(root, "tests")
git = {"core.fsmonitor": "false", "core.hooksPath": "/dev/null", "core.pager": "cat",
       "core.attributesFile": "/dev/null", "core.sshCommand": "false",
       "log.showSignature": "false", "gpg.program": "false"}
os.environ.update(TEST_DIR=tests, GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL="/dev/null",
                  GIT_ATTR_NOSYSTEM="1", GIT_NO_REPLACE_OBJECTS="1", GIT_OPTIONAL_LOCKS="0",
                  GIT_TERMINAL_PROMPT="0")


def set_git_env():
    items = list(git.items())
    os.environ["GIT_CONFIG_COUNT"] = str(len(items))
    for i, (k, v) in enumerate(items):
        os.environ[f"GIT_CONFIG_KEY_{i}"], os.environ[f"GIT_CONFIG_VALUE_{i}"] = k, v


set_git_env()


def unlisted(err):  # a folder the walk cannot list may hold a repository git still uses
    sys.exit("Bail out! polyrl grader: cannot list %s in /workspace: %s"
             % (err.filename, err.strerror))


seen = 0
for top, dirs, files in os.walk("/workspace", onerror=unlisted):  # every repository's drivers
    seen += 1
    if seen > 200000:
        sys.exit("Bail out! polyrl grader: over 200000 folders in /workspace")
    # "HEAD": a git directory itself, which git uses without any .git (`git -C top`)
    if ".git" in dirs or ".git" in files or "HEAD" in files:
        try:
            out = subprocess.run(["git", "-C", top, "config", "-z", "--name-only", "--list"],
                                 capture_output=True, text=True, timeout=20).stdout
        except FileNotFoundError:  # no git in the sandbox: no git config can run either
            break
        except subprocess.TimeoutExpired:
            sys.exit("Bail out! polyrl grader: git config timed out in " + top)
        for key in out.split("\0"):
            sect, _, last = key.rpartition(".")
            if key == "diff.external":  # set by the agent: git diff fails instead
                git[key] = ""
            if sect.split(".", 1)[0] in ("filter", "diff", "merge") and "." in sect:
                if last in ("clean", "smudge", "textconv", "command", "driver"):
                    git[key] = "cat"
                elif last == "process":
                    git[key] = ""
                if sect.startswith("filter."):
                    git[sect + ".required"] = "false"
    dirs[:] = [d for d in dirs if d != ".git"]
set_git_env()
# every python3 the check starts: no cwd or script folder first on sys.path; they come
# after the stdlib and site-packages, through the shipped sitecustomize (grade_site.py)
os.environ.update(PYTHONSAFEPATH="1", PYTHONNOUSERSITE="1",
                  PYTHONPATH=os.path.dirname(os.path.join(root, spec["site"])))
os.chdir("/workspace")
mode = spec["mode"]
try:
    if mode == "pytest":
        import pytest
        code = pytest.main(["-q", "-p", "no:cacheprovider", "-c", os.path.join(root, "pytest.ini"),
                            "--rootdir=" + tests, "--confcutdir=" + tests, tests])
    elif mode == "check.py":
        sys.argv = [os.path.join(tests, "check.py")]
        main = {"__name__": "__main__", "__file__": sys.argv[0], "__builtins__": __builtins__}
        exec(compile(check_src, sys.argv[0], "exec"), main)
        code = 0
    else:
        script = os.path.join(root, "run-tests.sh") if mode == "run-tests.sh" else \
            os.path.join(tests, "check.sh")
        sys.stdout.flush()
        # the host's execute-only copy of bash: the kernel makes a program it may not
        # read non-dumpable, so no agent program the script runs can patch its memory
        shell = os.path.join(root, "bash")
        code = subprocess.call([shell if os.path.isfile(shell) else "bash", script],
                               stdout=report)
        if code < 0:  # killed (by an agent program's kill -9 -1): its report is cut short
            print("Bail out! polyrl grader: the check script was killed by signal %d" % -code)
except SystemExit as e:
    code = 0 if e.code is None else e.code if isinstance(e.code, int) else 1
    if not isinstance(e.code, int | None):
        print(e.code, file=sys.stderr)
except BaseException:
    traceback.print_exc()
    code = 1
sys.stdout.flush()
sys.stderr.flush()
os._exit(int(code) & 255)  # no atexit hook or thread of imported agent code prints after
"""


def _site_text() -> str:
    """The source of ``grade_site.py`` (shipped as ``SITE_FILE``)."""
    from polyrl.domains.terminal import grade_site

    with open(grade_site.__file__, encoding="utf-8") as f:
        return f.read()


def _write_ro_tree(files: dict[str, str]) -> str:
    """A new host folder holding ``files`` (relative path -> text), readable by every uid
    (the sandbox's may be a private one) and not ``noexec`` (``bindable_dir``); the
    caller removes it."""
    from polyrl.sandbox.workspace import bindable_dir

    root = bindable_dir("polyrl-grade-")
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(path, 0o644)
    for top, dirs, _ in os.walk(root):  # whatever the host's umask made them
        for d in dirs:
            os.chmod(os.path.join(top, d), 0o755)
    return root


def _add_exec_only_bash(folder: str) -> None:
    """Copy this host's bash (the sandbox's: it binds the host's ``/usr``) into
    ``folder`` as ``bash``, mode 0111. Executed from there it is not dumpable, since the
    kernel may not let its user read it (``would_dump``): no program it runs can open its
    ``/proc/<pid>/mem`` to rewrite the check script it has parsed. No bash: nothing."""
    found = shutil.which("bash", path="/usr/bin:/bin")
    if found:
        dest = os.path.join(folder, "bash")
        shutil.copyfile(found, dest)
        os.chmod(dest, 0o111)


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
        except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
            pass
    blocks = extract_code_blocks(text)
    if blocks:
        return blocks[-1].code
    return text


def command_problem(command: str) -> str | None:
    """Why ``command`` cannot run as a step (it never reaches the sandbox), or None: a NUL
    byte or a lone surrogate (no environment variable can hold them), or over
    ``MAX_COMMAND_BYTES``."""
    if "\0" in command:
        return "the command contains a NUL byte"
    try:
        size = len(command.encode("utf-8", "surrogateescape"))
    except UnicodeEncodeError:
        return "the command is not valid text (a lone UTF-16 surrogate)"
    if size > MAX_COMMAND_BYTES:
        return f"the command is {size} bytes long, over {MAX_COMMAND_BYTES} (write big " \
               "files in several commands)"
    return None


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


def test_mode(task: Task) -> str:
    """How ``task``'s tests run: ``"run-tests.sh"`` (the task's script), ``"pytest"``
    (``test_*.py``), ``"check.py"`` or ``"check.sh"`` (TAP lines).

    Raises:
        GraderError: the task has none of these.
    """
    meta = task.metadata
    if meta.get("run_tests"):
        return "run-tests.sh"
    names = list(meta["tests"])
    if any(n.rsplit("/", 1)[-1].startswith("test_") and n.endswith(".py") for n in names):
        return "pytest"
    for name in ("check.py", "check.sh"):
        if name in names:
            return name
    raise GraderError(f"task {task.id}: tests have no test_*.py, check.py or check.sh")


def _pytest_summary(stdout: str, *, last_only: bool) -> tuple[int, int] | None:
    """``(passed, total)`` from pytest's summary line (the last line of ``stdout``, or with
    ``last_only=False`` the last line anywhere that is one), or None. Passed: ``passed``
    and ``xpassed``; total: those and ``failed``, ``error(s)``, ``skipped``, ``xfailed``
    (see ``grade_output``); ``deselected``, ``warnings`` and the like are not tests run."""
    lines = [ln.strip() for ln in stdout.splitlines() if ln.strip()]
    for line in reversed(lines[-1:] if last_only else lines):
        m = _PYTEST_SUMMARY_RE.match(line)
        if m:
            counts = dict.fromkeys(_PYTEST_PASSED + _PYTEST_NOT_PASSED, 0)
            for n, word in _PYTEST_COUNT_RE.findall(m.group(1)):
                word = "error" if word.startswith("error") else word
                if word in counts:
                    counts[word] += int(n)
            return sum(counts[w] for w in _PYTEST_PASSED), sum(counts.values())
    return None


def grade_output(res: ExecResult, mode: str = "check.py") -> tuple[float, int, int]:
    """``(fraction passed, passed, total)`` from a test run's stdout (stderr is ignored).

    ``mode`` (see ``test_mode``): ``"pytest"`` reads only pytest's final summary line
    (the last non-blank stdout line); ``"check.py"``/``"check.sh"`` only TAP lines;
    ``"run-tests.sh"`` the last pytest summary line, else TAP lines; a TAP plan line
    (``1..N``, printed by the generated checks first) makes the total N, so that the
    tests of a report cut short count as failed. No counts (or zero tests) gives
    ``(0.0, 0, 0)``: the exit status alone never scores.

    A pytest test counts as passed only when its body ran and did not fail (``passed``,
    and ``xpassed``: an xfail-marked test that passed); one that was skipped or xfailed
    counts in the total as not passed, as one that failed or errored does. Agent code a
    test imports can call ``pytest.skip()``/``pytest.xfail()`` (or raise their
    exceptions) for the cases it cannot solve: pytest leaves those out of its passed
    and failed counts, and a total without them gave 1.0. The price: a task whose own
    tests skip or xfail under its reference solution (a ``skipif`` for this machine,
    an xfail-marked known failure) scores it below 1.0; such tests belong out of the
    task. ``deselected`` tests (the task's own ``-k``/``-m``) did not run and do not count.

    A TAP report that cannot be the check's own scores ``(0.0, 0, total)``: a
    ``Bail out!`` line (the grader's, for a check script that was killed), more than
    one plan, more result lines than the plan, a test number twice or past the plan
    (lines an agent program printed into a check script's stdout), or a report with no
    plan cut short by a limit (``res.limit_hit``: a hung agent program would otherwise
    leave only the checks before it, all passed).
    """
    if mode in ("pytest", "run-tests.sh"):
        got = _pytest_summary(res.stdout, last_only=mode == "pytest")
        if got is not None and got[1]:
            return got[0] / got[1], got[0], got[1]
        if mode == "pytest":
            return 0.0, 0, 0
    tap = _TAP_RE.findall(res.stdout)
    plans = _TAP_PLAN_RE.findall(res.stdout)
    planned = int(plans[0]) if plans else 0
    total = max(len(tap), planned)
    if not total:
        return 0.0, 0, 0
    numbers = [int(n) for _, n in tap if n]
    forged = (bool(_TAP_BAIL_RE.search(res.stdout)) or len(plans) > 1
              or len(numbers) != len(set(numbers))
              or (planned and (len(tap) > planned or any(n > planned for n in numbers)))
              or (not planned and res.limit_hit is not None))
    if forged:
        return 0.0, 0, total
    good = sum(1 for t, _ in tap if t == "ok")
    return good / total, good, total


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

    def _exec(self, command: str, timeout_s: float, *, stdin: str | None = None,
              env: dict[str, str] | None = None, as_init: bool = False,
              ro_binds: list[tuple[str, str]] | None = None) -> ExecResult:
        limits = self.session.limits.replace(timeout_s=timeout_s, cpu_s=timeout_s)
        res = self.session.run(command, limits=limits, stdin=stdin, env=env, as_init=as_init,
                               ro_binds=ro_binds)
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
        problem = command_problem(command)
        if problem is not None:  # the policy's turn, not a sandbox failure: it counts
            exit_code = None
            obs = f"[not run: {problem}]"
        else:
            budget = min(STEP_TIMEOUT_S, meta["agent_timeout_s"] - self.used_s)
            res = self._exec(command, max(budget, 0.5))
            self.used_s += res.wall_s
            exit_code = res.exit_code
            obs = format_observation(res)
        self.turns += 1
        if self.turns >= meta["max_turns"] or self.used_s >= meta["agent_timeout_s"]:
            final_obs, reward, term, trunc, info = self._finish(terminated=False)
            return obs + "\n" + final_obs, reward, term, trunc, info
        return obs, 0.0, False, False, {"exit_code": exit_code}

    def _finish(self, *, terminated: bool) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.finished = True
        score = self.run_tests()
        obs = f"[episode over: {score.components['tests_passed']:.0f}/" \
              f"{score.components['tests_total']:.0f} tests passed]"
        return obs, score.reward, terminated, not terminated, {"score": score}

    def run_tests(self) -> Score:
        """Run the task's tests through ``GRADER`` and grade (reward = fraction passed).

        The test files are written by the host into a new folder that the grading
        command alone sees, read-only (bwrap; on the process backend they travel on stdin
        and the grading command writes them into a fresh folder of its ``/tmp``);
        ``check.py`` travels on stdin and runs from memory. Nothing is copied into
        ``/workspace``.

        Raises:
            SandboxError: the sandbox failed. GraderError: the task has no runnable tests.
        """
        meta = self.task.metadata
        mode = test_mode(self.task)
        files = {f"tests/{rel}": text for rel, text in meta["tests"].items()}
        files["pytest.ini"] = "[pytest]\n"
        files[SITE_FILE] = _site_text()
        if meta.get("run_tests"):
            files["run-tests.sh"] = meta["run_tests"]
        spec: dict[str, Any] = {"mode": mode, "files": files, "site": SITE_FILE}
        host_dir, mount = None, ""
        if getattr(self.sandbox, "backend", None) == "bwrap":
            # the files go in read-only: no program the check runs can rewrite check.sh or
            # run-tests.sh while bash reads it, nor a test's expected-output file
            memory = {"tests/check.py"} if mode == "check.py" else set()
            host_dir = _write_ro_tree({k: v for k, v in files.items() if k not in memory})
            if mode in ("check.sh", "run-tests.sh"):
                _add_exec_only_bash(host_dir)
            mount = TESTS_MOUNT + secrets.token_hex(8)
            spec = {"mode": mode, "root": mount, "site": SITE_FILE,
                    "files": {k: v for k, v in files.items() if k in memory}}
        try:
            res = self._exec('cd /workspace && exec python3 -I -c "$POLYRL_GRADER"',
                             meta["test_timeout_s"], env={"POLYRL_GRADER": GRADER},
                             stdin=json.dumps(spec), as_init=True,
                             ro_binds=[(host_dir, mount)] if host_dir else None)
        finally:
            if host_dir:
                shutil.rmtree(host_dir, ignore_errors=True)
        frac, good, total = grade_output(res, mode)
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
