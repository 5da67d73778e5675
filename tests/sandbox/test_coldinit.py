"""The cold init (polyrl.sandbox.coldinit): its bytes are its source's, and with it a cold
execution's program is an ordinary process (not pid 1), as in warm sandboxes."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

import pytest

import polyrl.sandbox as sandbox_pkg
from polyrl.sandbox import Limits, Sandbox, coldinit

SOURCE = Path(sandbox_pkg.__file__).parent / "coldinit_x86_64.S"


@pytest.mark.skipif(not (shutil.which("as") and shutil.which("objcopy")),
                    reason="needs GNU as and objcopy")
def test_the_embedded_bytes_are_the_source_assembled(tmp_path: Path):
    obj, raw = tmp_path / "init.o", tmp_path / "init.bin"
    subprocess.run(["as", "--64", "-o", str(obj), str(SOURCE)], check=True)
    relocs = subprocess.run(["objdump", "-r", str(obj)], capture_output=True, text=True)
    assert "R_X86_64" not in relocs.stdout  # position-independent, as the ELF needs
    subprocess.run(["objcopy", "-O", "binary", "-j", ".text", str(obj), str(raw)], check=True)
    assert raw.read_bytes() == coldinit._CODE["x86_64"]


def _init() -> int:
    fd = coldinit.init_fd()
    if fd is None:  # pragma: no cover - not x86_64, or memfds not executable here
        pytest.skip("no cold init on this machine")
    return fd


def _run_init(*argv: str, path: str = "/usr/bin:/bin") -> subprocess.CompletedProcess:
    fd = _init()
    return subprocess.run([f"/proc/self/fd/{fd}", *argv], capture_output=True,
                          pass_fds=(fd,), env={"PATH": path}, timeout=30)


@pytest.mark.parametrize("argv, status, stderr", [
    (["sh", "-c", "exit 42"], 42, b""),
    (["sh", "-c", "kill -TERM $$"], 128 + 15, b""),
    (["no-such-program-here"], 127,
     b"polyrl sandbox: no-such-program-here: No such file or directory\n"),
    (["/no/such/dir/prog"], 127, b"polyrl sandbox: /no/such/dir/prog: No such file or directory\n"),
    ([""], 127, b"polyrl sandbox: : No such file or directory\n"),
    # longer than NAME_MAX: as execvp (and a warm execution), not "not found"
    (["x" * 5000], 126, b"polyrl sandbox: " + b"x" * 5000 + b": File name too long\n"),
])
def test_the_init_runs_the_program_and_exits_as_it_did(argv, status, stderr):
    res = _run_init(*argv)
    assert (res.returncode, res.stderr) == (status, stderr)


def test_a_file_that_cannot_run_is_126_with_the_reason(tmp_path: Path):
    plain = tmp_path / "plain"
    plain.write_text("echo hi\n")  # no execute bit (root needs one too)
    res = _run_init(str(plain))
    assert (res.returncode, res.stderr) == (126, f"polyrl sandbox: {plain}: Permission "
                                                 "denied\n".encode())
    plain.chmod(0o755)  # no #! line: not run through /bin/sh (as a warm execution)
    res = _run_init(str(plain))
    assert (res.returncode, res.stderr) == (126, f"polyrl sandbox: {plain}: Exec format "
                                                 "error\n".encode())


def test_the_init_searches_path_as_a_warm_execution_does(tmp_path: Path):
    (tmp_path / "unexecutable").mkdir()
    (tmp_path / "unexecutable" / "prog").write_text("#!/bin/sh\necho wrong\n")
    (tmp_path / "bin").mkdir()
    prog = tmp_path / "bin" / "prog"
    prog.write_text("#!/bin/sh\necho found \"$@\"\n")
    prog.chmod(0o755)
    # an entry that is missing, one that is a file, one whose match is not executable
    path = f"/no/such:/etc/hostname:{tmp_path}/unexecutable:{tmp_path}/bin:/usr/bin:/bin"
    res = _run_init("prog", "a b", path=path)
    assert (res.returncode, res.stdout) == (0, b"found a b\n")
    # a file that cannot run (no #! line) is passed over, as in a warm execution
    (tmp_path / "noshebang").mkdir()
    (tmp_path / "noshebang" / "true").write_text("echo wrong\n")
    (tmp_path / "noshebang" / "true").chmod(0o755)
    res = _run_init("true", path=f"{tmp_path}/noshebang:/usr/bin:/bin")
    assert (res.returncode, res.stdout, res.stderr) == (0, b"", b"")
    res = _run_init("true", path=f"{tmp_path}/noshebang:/no/such")  # reported at the end
    assert (res.returncode, res.stderr) == (126, b"polyrl sandbox: true: Exec format error\n")
    # only the unexecutable match: EACCES, as execvp reports it
    res = _run_init("prog", path=f"/no/such:{tmp_path}/unexecutable")
    assert (res.returncode, res.stderr) == (126, b"polyrl sandbox: prog: Permission denied\n")
    # an entry too long for a path: ENAMETOOLONG, as execve says and os.execvpe reports
    # (the init passed it over in silence: 127, "No such file", where a warm execution
    # said 126, "File name too long")
    res = _run_init("prog", path="/" + "a" * 5000 + ":/no/such")
    assert (res.returncode, res.stderr) == (126, b"polyrl sandbox: prog: File name too long\n")
    res = _run_init("prog", path="/" + "a" * 5000 + f":{tmp_path}/bin")  # later ones run
    assert (res.returncode, res.stdout) == (0, b"found\n")
    res = _run_init("prog", path=f"/no/such:{'/b' * 2046}")  # fits, but only with the name
    assert (res.returncode, res.stderr) == (126, b"polyrl sandbox: prog: File name too long\n")


def test_the_init_memfd_is_sealed():
    fd = _init()
    with pytest.raises(PermissionError):
        os.pwrite(fd, b"\x90", 200)
    seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
    assert seals & fcntl.F_SEAL_WRITE and seals & fcntl.F_SEAL_SEAL


@pytest.fixture(scope="module")
def cold() -> Sandbox:
    _init()
    return Sandbox(backend="bwrap", limits=Limits(timeout_s=10, cpu_s=10), warm=False)


def test_a_cold_program_is_pid_2_under_the_init_and_holds_no_extra_descriptor(cold: Sandbox):
    res = cold.run_python(
        "import os\nprint(os.getpid(), os.getppid(), sorted(int(p) for p in os.listdir('/proc')"
        " if p.isdigit()), sorted(os.listdir('/proc/self/fd')))\n"
        "for what in ('/proc/1/exe', '/proc/1/fd', '/proc/1/mem'):\n"
        "    try:\n        open(what, 'rb').read(1) if what != '/proc/1/fd' else os.listdir(what)\n"
        "        print('READ', what)\n    except OSError as e:\n        print(e.errno)\n")
    assert res.exit_code == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == "2 1 [1, 2] ['0', '1', '2', '3']", lines  # 3: listdir's own
    assert not any(line.startswith("READ") for line in lines), lines  # the init is not dumpable


def test_the_init_reaps_orphans(cold: Sandbox):
    """60 orphans (sh exits, its background job ends later) under max_pids 16: as pid
    1, a Python program reaped none and its 14th os.system failed to fork. (In a warm
    or fork-server execution the program is the subreaper of its own processes: its
    orphans are its own to reap.)"""
    # 20 ms between orphans: at most two alive at once when reaped (back to back, ~8
    # were, and as root max_pids is exact: 6 of 20 runs failed on an idle machine)
    res = cold.run_python("import os, time\nfor i in range(60):\n"
                          "    assert os.system('sleep 0.01 &') == 0, i\n"
                          "    time.sleep(0.02)\nprint('done')",
                          limits=Limits(max_pids=16, timeout_s=20))
    assert (res.exit_code, res.stdout) == (0, "done\n"), res


def test_usage_reaches_the_host_through_the_init(cold: Sandbox):
    res = cold.run_python("x = bytearray(150 << 20)\nimport time\n"
                          "while time.process_time() < 0.3:\n    pass\n")
    assert res.exit_code == 0, res.stderr
    assert res.cpu_s >= 0.3 and res.peak_memory_mib >= 150, res


def test_max_pids_counts_the_init_for_the_program(cold: Sandbox):
    """The init is one more process of the sandbox's uid: the program keeps its
    ``max_pids`` (itself included)."""
    code = ("import os, sys\nkids = []\nfor _ in range(int(sys.argv[1])):\n"
            "    pid = os.fork()\n    if pid == 0:\n        import time; time.sleep(2); "
            "os._exit(0)\n    kids.append(pid)\nprint(len(kids))\n")
    lim = Limits(max_pids=6, timeout_s=10)
    res = cold.run([cold.python, "-c", code, "5"], limits=lim)
    assert (res.exit_code, res.stdout) == (0, "5\n"), res
    res = cold.run([cold.python, "-c", code, "6"], limits=lim)
    assert res.exit_code != 0 and res.limit_hit == "max_pids", res


def test_max_pids_is_the_programs_own_beside_a_neighbour_of_the_same_user(cold: Sandbox):
    """Without a private uid (a normal user) RLIMIT_NPROC was widened by the user's
    processes counted at the start: 40 more of that user started beside it (another
    sandbox, a parallel test) and the program's 3rd fork failed with EAGAIN. The
    sandbox's own user namespace now counts only its processes (as root, its uid)."""
    import sys
    import threading
    import time

    code = ("import os, sys, time\ntime.sleep(1.5)\nkids = []\n"
            "for _ in range(int(sys.argv[1])):\n    pid = os.fork()\n    if pid == 0:\n"
            "        time.sleep(2); os._exit(0)\n    kids.append(pid)\nprint(len(kids))\n")
    neighbour = ("import os, time\nfor _ in range(40):\n    if os.fork() == 0:\n"
                 "        time.sleep(4); os._exit(0)\ntime.sleep(4)\n")
    procs: list[subprocess.Popen] = []

    def start_neighbour() -> None:
        time.sleep(0.2)  # after the sandbox's start: the program forks at 1.5 s
        procs.append(subprocess.Popen([sys.executable, "-c", neighbour]))

    lim = Limits(max_pids=6, timeout_s=10)
    try:
        t = threading.Thread(target=start_neighbour)
        t.start()
        res = cold.run([cold.python, "-c", code, "5"], limits=lim)
        t.join()
        assert (res.exit_code, res.stdout) == (0, "5\n"), res
        res = cold.run([cold.python, "-c", code, "6"], limits=lim)
        assert res.exit_code != 0 and res.limit_hit == "max_pids", res
    finally:
        for p in procs:
            p.wait()


@pytest.mark.skipif(os.geteuid() != 0, reason="without a private uid (root) the host's "
                    "SIGTERM goes to bwrap, which ends the sandbox at once")
def test_the_host_sigterm_reaches_the_program_not_the_init(cold: Sandbox):
    """On timeout the program gets SIGTERM and its grace period (the init, with every
    signal blocked, lives on until the program ends)."""
    code = ("import signal, sys, time\n"
            "signal.signal(signal.SIGTERM, lambda *a: (print('graceful', flush=True), "
            "sys.exit(3)))\nprint('ready', flush=True)\ntime.sleep(60)\n")
    res = cold.run_python(code, limits=Limits(timeout_s=1, kill_grace_s=5))
    assert res.stdout == "ready\ngraceful\n" and res.limit_hit == "timeout_s", res


def test_a_session_step_may_run_as_pid_1(cold: Sandbox):
    """``as_init=True`` (a trusted grader): the step's program is pid 1 and a program it
    runs cannot kill it (the kernel drops SIGKILL sent to pid 1 from inside)."""
    code = ("import os, subprocess\nsubprocess.run(['sh', '-c', 'kill -9 -1'])\n"
            "print(os.getpid(), 'alive')\n")
    with cold.session() as s:
        assert s.run([cold.python, "-c", code], as_init=True).stdout == "1 alive\n"
        res = s.run([cold.python, "-c", code])
        assert (res.stdout, res.signal) == ("", 9), res
@pytest.mark.skipif(os.geteuid() != 0, reason="needs a second uid for the canary")
def test_the_init_outside_a_pid_namespace_kills_nothing_when_done():
    """Only as pid 1 does the init kill(-1) what is left: elsewhere (its start-up test
    in ``init_fd``, these tests) kill(-1) would reach every process of its uid, as root
    the whole host. Run as nobody, beside a canary of nobody's."""
    fd = _init()
    canary = subprocess.Popen(["sleep", "30"], user=65534, group=65534, extra_groups=[])
    try:
        res = subprocess.run([f"/proc/self/fd/{fd}", "sh", "-c", "exit 3"], pass_fds=(fd,),
                             user=65534, group=65534, extra_groups=[],
                             env={"PATH": "/usr/bin:/bin"}, timeout=30)
        assert res.returncode == 3
        assert canary.poll() is None, "the init killed a process outside its namespace"
    finally:
        canary.kill()
        canary.wait()


def test_a_tracee_stop_is_not_the_programs_end(cold: Sandbox):
    """PTRACE_TRACEME makes the init the program's tracer: its stops reach the init's
    wait4 (__WALL). They are not an exit: the init exited 255 at once (the stopped
    program's CPU time lost) where a warm execution runs into its wall limit."""
    code = ("import ctypes, os, signal, sys\n"
            "print(ctypes.CDLL(None).ptrace(0, 0, 0, 0), flush=True)\n"
            "os.kill(os.getpid(), signal.SIGUSR1)\nprint('not stopped')\n")
    res = cold.run_python(code, limits=Limits(timeout_s=1, kill_grace_s=0.2))
    assert (res.stdout, res.exit_code, res.limit_hit) == ("0\n", None, "timeout_s"), res


def test_usage_of_what_the_program_leaves_running_reaches_the_host(cold: Sandbox):
    """An orphan still running when the program exits: the init kills and reaps it
    (a process killed at the namespace's end is reaped uncounted: cpu_s was 0.03). The
    program ends once the orphan has used 0.5 s of CPU (a fixed 0.6 s sleep gave it
    0.2 s on a loaded host)."""
    code = ("import os, time\nr, w = os.pipe()\nif os.fork() == 0:\n    pid = os.fork()\n"
            "    if pid == 0:\n        while True:\n            pass\n"
            "    os.write(w, str(pid).encode())\n    os._exit(0)\n"
            "orphan, tick = int(os.read(r, 32)), os.sysconf('SC_CLK_TCK')\nwhile True:\n"
            "    f = open(f'/proc/{orphan}/stat').read().rsplit(')', 1)[1].split()\n"
            "    if (int(f[11]) + int(f[12])) / tick >= 0.5:\n        break\n"
            "    time.sleep(0.05)\n")
    res = cold.run_python(code)
    assert res.exit_code == 0 and res.cpu_s >= 0.4, res


@pytest.mark.skipif(os.geteuid() != 0, reason="without a private uid (root) the host's "
                    "SIGKILL goes to bwrap, which ends the sandbox at once")
def test_usage_reaches_the_host_when_the_host_kills_the_program(cold: Sandbox):
    """Past the grace period the host's SIGKILL spares the init once: it reaps the
    program (cpu_s was 0.004 and peak_memory_mib bwrap's own, as when the init died
    with it) and whatever is left, and exits."""
    code = ("import os, signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "x = bytearray(150 << 20)\nif os.fork() == 0:\n"
            "    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "while True:\n    pass\n")
    res = cold.run_python(code, limits=Limits(timeout_s=2, kill_grace_s=0.3, cpu_s=10))
    assert (res.signal, res.limit_hit) == (9, "timeout_s"), res
    # two busy processes for 2.3 s: >= 0.3 s even on a loaded host (lost, it read 0.004)
    assert res.cpu_s >= 0.3 and res.peak_memory_mib >= 150, res



def test_a_program_cannot_pass_for_one_that_was_not_found(cold: Sandbox):
    """bwrap's own "execvp" failure line is read as 127/126 only where bwrap executes the
    program itself: under the init such a line is the program's (it exited 1; it read as
    exit 127, "not found", with its stderr rewritten)."""
    code = ("import sys\nsys.stderr.write('bwrap: execvp grader: No such file or directory\\n')"
            "\nsys.exit(1)\n")
    res = cold.run_python(code)
    assert (res.exit_code, res.stderr) == (
        1, "bwrap: execvp grader: No such file or directory\n"), res
    with cold.session() as s:  # as pid 1, a real exec failure is still reported as one
        res = s.run(["no-such-program-here"], as_init=True)
        assert (res.exit_code, res.stderr) == (
            127, "polyrl sandbox: no-such-program-here: No such file or directory\n"), res
