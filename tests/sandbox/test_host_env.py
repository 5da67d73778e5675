"""What the sandbox gets right whatever the host's environment (user, threads, rlimits,
TMPDIR)."""

from __future__ import annotations

import os
import subprocess
import sys

from polyrl.sandbox.bwrap import _count_user_processes


def test_the_user_count_includes_threads_as_rlimit_nproc_does():
    """RLIMIT_NPROC counts tasks, threads included: a non-root host whose trainer runs
    torch threads must not leave the program fewer than its max_pids (a cold execution
    that forked 4 with max_pids=8 hit max_pids beside a host with 5 threads)."""
    code = ("import threading, sys\nev = threading.Event()\n"
            "for _ in range(30): threading.Thread(target=ev.wait, daemon=True).start()\n"
            "print('up', flush=True)\nsys.stdin.read()\n")
    before = _count_user_processes(os.getuid())
    p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "up\n"
        during = _count_user_processes(os.getuid())
    finally:
        p.communicate("")
    # 31 tasks (30 threads + the main one); allow for processes coming and going meanwhile
    assert during - before >= 25, (before, during)


def test_a_host_hard_limit_below_the_programs_says_which_and_how_to_fix():
    """Under a host `ulimit -n 256` every bwrap execution failed with "ValueError: not
    allowed to raise maximum limit" (from the trampoline), naming neither the limit nor
    a fix."""
    code = ("from polyrl.sandbox import Sandbox\n"
            "try:\n    Sandbox(warm=False).run(['true'])\n"
            "except Exception as e:\n    print(type(e).__name__, e)\n")

    def low() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         preexec_fn=low, timeout=60).stdout
    assert out.startswith(("SandboxError", "SandboxUnavailableError")), out
    assert "RLIMIT_NOFILE=1024" in out and "hard limit is 256" in out, out


def test_a_tmpdir_the_private_uids_cannot_reach_says_so(tmp_path):
    """As root, TMPDIR under a 0700 folder (/root/tmp) failed every bwrap execution with
    "bwrap: Can't find source path ...: No such file or directory"."""
    import pytest

    if os.geteuid() != 0:
        pytest.skip("private uids only as root")
    hidden = tmp_path / "hidden"
    (hidden / "tmp").mkdir(parents=True)
    hidden.chmod(0o700)
    code = ("from polyrl.sandbox import Sandbox\n"
            "try:\n    print(Sandbox(warm=False).run(['true']).error_message)\n"
            "except Exception as e:\n    print(type(e).__name__, e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, TMPDIR=str(hidden / "tmp")), timeout=60).stdout
    assert out.startswith("SandboxUnavailableError") and "set TMPDIR" in out, out


def test_a_noexec_tmpdir_still_lets_cold_programs_run_what_they_write(tmp_path):
    """A hardened /tmp (noexec) held the workspaces that cold executions bind: the flag
    stayed in the sandbox and ./s.sh gave Permission denied (warm ran it)."""
    import pytest

    mnt = tmp_path / "noexec"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "noexec,size=16m", "tmpfs", str(mnt)],
            capture_output=True).returncode != 0:
        pytest.skip("needs root to mount a noexec tmpfs")
    try:
        code = ("from polyrl.sandbox import Sandbox\n"
                "r = Sandbox(warm=False).run(['sh', '-c', 'printf \"#!/bin/sh\\\\necho ran\" "
                "> s.sh; chmod +x s.sh; ./s.sh'])\nprint(r.stdout + r.stderr)\n")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env=dict(os.environ, TMPDIR=str(mnt)), timeout=60)
        assert out.stdout == "ran\n\n", (out.stdout, out.stderr[-2000:])
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
