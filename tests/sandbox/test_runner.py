"""Output pumping, stdin, files and exit statuses, through both backends."""

from __future__ import annotations

import pytest

from polyrl.errors import ConfigError
from polyrl.sandbox import Limits, Sandbox


@pytest.fixture(params=["bwrap", "process"])
def box(request, sb: Sandbox) -> Sandbox:
    return sb if request.param == "bwrap" else Sandbox(backend="process")


def test_200kb_output_no_deadlock(box: Sandbox):
    res = box.run_python("import sys; sys.stdout.write('y' * 200_000); "
                         "sys.stderr.write('e' * 100_000)", limits=Limits(timeout_s=5))
    assert res.exit_code == 0 and res.limit_hit is None
    assert len(res.stdout) == 200_000 and len(res.stderr) == 100_000
    assert not res.stdout_truncated and not res.stderr_truncated


def test_stdin_files_collect_cwd_and_exit_codes(box: Sandbox):
    res = box.run(["bash", "-c", "cat in/data.txt; read x; echo got:$x; pwd; echo o > out.bin; "
                   "exit 7"], files={"in/data.txt": "DATA\n"}, stdin="line\n",
                  collect=["out.bin", "missing"])
    assert res.exit_code == 7 and res.signal is None and res.error is None
    assert res.stdout.startswith("DATA\ngot:line\n")
    assert res.files == {"out.bin": b"o\n"}
    assert res.wall_s > 0 and res.cpu_s >= 0 and res.peak_memory_mib > 0
    res = box.run("pwd", files={"sub/a": "x"}, cwd="sub")
    assert res.stdout.strip().endswith("/sub")


def test_killed_by_signal_reported(box: Sandbox):
    res = box.run_python("import ctypes; ctypes.string_at(0)")  # a real segfault
    assert res.exit_code is None and res.signal == 11 and res.limit_hit is None


def test_bad_input_is_config_error(box: Sandbox):
    with pytest.raises(ConfigError, match="relative path"):
        box.run(["true"], files={"/etc/x": "no"})
    with pytest.raises(ConfigError, match="relative path"):
        box.run(["true"], files={"../x": "no"})
    with pytest.raises(ConfigError, match="unknown backend"):
        Sandbox(backend="docker")


def test_file_size_limit(box: Sandbox):
    res = box.run_python("open('big', 'wb').write(b'x' * (3 << 20))",
                         limits=Limits(max_file_mib=1))
    assert res.limit_hit == "max_file_mib"


def test_transcript_records_every_run(tmp_path):
    from polyrl.sandbox.transcript import read_transcript

    path = tmp_path / "t.jsonl"
    box = Sandbox(transcript_path=path, limits="strict")
    box.run(["echo", "one"])
    with box.session() as s:
        s.run("echo two")
    recs = read_transcript(path)
    assert [r["result"]["stdout"] for r in recs] == ["one\n", "two\n"]
    assert recs[0]["backend"] == "bwrap" and recs[0]["limits"]["timeout_s"] == 5.0
    assert recs[1]["kind"] == "session"


def test_raise_errors_false_returns_typed_error(monkeypatch):
    monkeypatch.setenv("POLYRL_BWRAP", "/nonexistent/bwrap")
    res = Sandbox().run(["true"], raise_errors=False)
    assert res.error == "SandboxUnavailableError" and "POLYRL_BWRAP" in res.error_message
    assert not res.ok and res.exit_code is None


def test_path_names_for_files_and_collect(box: Sandbox):
    """``os.PathLike`` names work as ``str`` ones; ``ExecResult.files`` keys are ``str``."""
    from pathlib import Path

    res = box.run_python("open('b.txt', 'w').write(open('a.txt').read() * 2)",
                         files={Path("a.txt"): "hi"}, collect=[Path("b.txt")])
    assert res.files == {"b.txt": b"hihi"}


@pytest.mark.timeout(60)
def test_a_daemon_holding_the_output_does_not_hold_the_call(box: Sandbox):
    """Under the process backend a daemon of its own session is out of the kill's reach;
    it held the host's call until it exited (12 s here, for good with ``sleep
    infinity``). The host stops reading its pipes STREAMS_AFTER_EXIT_S after the main
    process is gone; a sandbox kills it outright."""
    import time

    tag = f"polyrl-daemon-{time.monotonic_ns()}"
    t0 = time.monotonic()
    res = box.run(["bash", "-c", f"echo hi; setsid bash -c 'exec -a {tag} sleep 30' & exit 0"],
                  limits=Limits(timeout_s=10))
    took = time.monotonic() - t0
    import os
    import signal
    from pathlib import Path

    for proc in Path("/proc").iterdir():  # the process backend's daemon lives on
        try:
            if proc.name.isdigit() and tag.encode() in (proc / "cmdline").read_bytes():
                os.kill(int(proc.name), signal.SIGKILL)
        except OSError:
            pass
    assert res.stdout == "hi\n" and took < 6, (took, res)


def test_a_program_that_cannot_be_executed_exits_127_or_126(box: Sandbox):
    """As a shell reports it, on every path (cold bwrap said exit 1, the process backend
    raised SandboxError: a missing program is the program's failure, not the sandbox's)."""
    missing = box.run(["no-such-program-here", "x"])
    assert (missing.exit_code, missing.error) == (127, None), missing
    assert "no-such-program-here" in missing.stderr
    if box.backend == "bwrap":  # cold and warm word it alike (bwrap said "bwrap: execvp")
        assert missing.stderr.startswith("polyrl sandbox: no-such-program-here: No such file")
    for path in ("/etc/passwd", "/usr"):  # not executable, a directory
        res = box.run([path])
        assert (res.exit_code, res.error) == (126, None), (path, res)
