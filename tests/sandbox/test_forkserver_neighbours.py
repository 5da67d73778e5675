"""Fork-server children inherit memory: none may hold another execution's data."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid

import pytest

from polyrl.errors import SandboxError
from polyrl.sandbox import ForkServer, Limits

# Scans the anonymous memory of its own process for the token it gets (reversed) on
# stdin, and prints what follows each hit: another execution's code, stdin, files or
# output would show as "-code", "-in", "-file", "-out". The spy's own copies of the token
# are followed by anything but "-".
SPY = r"""
import ctypes, sys
tok = sys.stdin.read()[::-1].encode()
found = set()
with open("/proc/self/maps") as maps:
    regions = [line.split() for line in maps]
for parts in regions:  # anonymous memory: the heap, arenas, stacks
    if parts[1][0] != "r" or (len(parts) > 5 and parts[5] not in ("[heap]", "[stack]")):
        continue
    lo, hi = (int(x, 16) for x in parts[0].split("-"))
    data = ctypes.string_at(lo, hi - lo)
    i = data.find(tok)
    while i >= 0:
        after = data[i + len(tok):i + len(tok) + 5]
        if after[:1] == b"-":
            found.add(after.decode("latin-1"))
        i = data.find(tok, i + 1)
print(sorted(found))
"""


@pytest.mark.parametrize("isolation", ["namespaces", "landlock"])
def test_no_execution_holds_another_ones_code_input_or_output(isolation: str):
    token = uuid.uuid4().hex
    lim = Limits(timeout_s=20, cpu_s=20)
    with ForkServer(preload=[], limits=lim, workers=2, isolation=isolation) as fs:
        # a finished execution whose code, stdin, files and output carry the token
        past = fs.run_python(f"import sys; sys.stdin.read(); print('{token}-out') # {token}-code",
                             stdin=f"{token}-in", files={"f.txt": f"{token}-file"})
        assert past.exit_code == 0 and token in past.stdout
        # one running beside the spy, its output already read by the server
        busy = f"import sys, time; print('{token}-out2', flush=True); time.sleep(3) # {token}-code2"
        t = threading.Thread(target=fs.run_python, args=(busy,),
                             kwargs={"stdin": f"{token}-in2", "files": {"g": f"{token}-file2"}})
        t.start()
        time.sleep(1.0)
        spy = fs.run_python(SPY, stdin=token[::-1])
        t.join()
    assert spy.exit_code == 0, spy.stderr
    assert spy.stdout.strip() == "[]", f"another execution's data in memory: {spy.stdout}"


def _fork_server_processes(top: int) -> dict[int, int]:
    """``{pid: parent pid}`` of ``top``'s descendants (host pids)."""
    parents = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    data = f.read()
            except OSError:
                continue
            parents[int(name)] = int(data[data.rindex(b")") + 2:].split()[1])
    found, frontier = {}, [top]
    while frontier:
        p = frontier.pop()
        for kid, parent in parents.items():
            if parent == p and kid not in found:
                found[kid] = p
                frontier.append(kid)
    return found


def test_a_dead_forker_fails_its_server_which_is_replaced():
    with ForkServer(preload=[], limits=Limits(timeout_s=10), workers=1) as fs:
        assert fs.run_python("print(1)").stdout == "1\n"
        server = fs._server
        tree = _fork_server_processes(server.proc.pid)
        # at rest the deepest process is the forker, the child of the server (pid 1)
        depth = {}
        for pid in tree:
            d, p = 0, pid
            while p in tree:
                d, p = d + 1, tree[p]
            depth[pid] = d
        forker = max(depth, key=depth.get)
        os.kill(forker, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while not server.dead and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.dead, "the server kept running without its forker"
        assert fs.run_python("print(2)").stdout == "2\n"
        assert fs.restarts == 1
    with pytest.raises(SandboxError):
        fs.run_python("print(3)")  # closed


NEIGHBOURS = r"""
import os, resource
out = []
for what, call in [
        ("prlimit", lambda pid: resource.prlimit(pid, resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))),
        ("setpriority", lambda pid: os.setpriority(os.PRIO_PROCESS, pid, 19)),
        ("affinity", lambda pid: os.sched_setaffinity(pid, {0})),
        ("scheduler", lambda pid: os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0)))]:
    for pid in sorted({1, os.getppid()} - {0}):  # the server and (fork-server) the forker
        try:
            call(pid)
            out.append(f"{what}({pid}) done")
        except OSError as e:
            out.append(f"{what}:{e.errno}")
try:
    os.setpriority(os.PRIO_USER, 0, 19)  # every process of the uid
    out.append("user renice done")
except OSError as e:
    out.append(f"user:{e.errno}")
# on itself all of these work
resource.prlimit(0, resource.RLIMIT_STACK, resource.getrlimit(resource.RLIMIT_STACK))
os.setpriority(os.PRIO_PROCESS, 0, os.getpriority(os.PRIO_PROCESS, 0))
os.sched_setaffinity(0, os.sched_getaffinity(0))
assert resource.prlimit(1, resource.RLIMIT_FSIZE)  # reading another's limits is fine
print(" ".join(sorted(set(out))))
"""

PROBE = ("import os, resource; print(resource.getrlimit(resource.RLIMIT_FSIZE)[0], "
         "os.getpriority(os.PRIO_PROCESS, 0), len(os.sched_getaffinity(0)))")


def test_an_execution_cannot_change_the_limits_or_scheduling_of_others():
    with ForkServer(preload=[], limits=Limits(timeout_s=10, max_file_mib=8), workers=1) as fs:
        before = fs.run_python(PROBE).stdout
        res = fs.run_python(NEIGHBOURS)
        assert res.exit_code == 0, res.stderr
        assert res.stdout.split() == ["affinity:1", "prlimit:1", "scheduler:1",
                                      "setpriority:1", "user:1"]
        assert fs.run_python(PROBE).stdout == before  # the next execution: as before
        assert fs.restarts == 0


def test_bwrap_executions_cannot_change_their_servers_either(sb):
    res = sb.run_python(NEIGHBOURS)
    assert res.exit_code == 0, res.stderr
    assert "done" not in res.stdout, res.stdout


# clone(CLONE_PARENT | SIGCHLD): a child of the forker, in a session of its own, that
# keeps the execution's stdout/stderr open
ESCAPE = r"""
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
pid = libc.syscall(56 if os.uname().machine == "x86_64" else 220, 0x8000 | 17, 0, 0, 0, 0)
if pid == 0:
    os.setsid()
    time.sleep(10)
    os._exit(0)
err = ctypes.get_errno()
time.sleep(0.3)  # the child is in its own session by now
print("clone", pid, err)
"""


def test_no_process_leaves_its_execution_as_the_forkers_child():
    with ForkServer(preload=[], limits="default") as fs:
        t0 = time.monotonic()
        res = fs.run_python(ESCAPE, limits=fs.limits.replace(timeout_s=3, cpu_s=3))
        took = time.monotonic() - t0
        after = fs.run_python("import os; print(sorted(int(p) for p in os.listdir('/proc') "
                              "if p.isdigit() and int(p) != os.getpid()))")
        pidns = fs.uses_pid_namespace
    assert res.exit_code == 0, res.stderr
    assert res.stdout.split()[:2] == ["clone", "-1"], res.stdout
    assert took < 5, f"the execution ended after {took:.1f} s"
    # the server and the forker only (with a pid namespace: its own init only)
    assert after.stdout.strip() == ("[1]" if pidns else "[1, 3]"), after.stdout


PTY = """
import os
m, s = os.openpty()
os.write(m, b"hi\\n")
mounts = [line.split()[4] for line in open("/proc/self/mountinfo")].count("/dev/pts")
print(mounts, os.read(s, 3), sorted(os.listdir("/dev/pts")))
"""


def test_every_execution_has_ptys_of_its_own(fs):
    """A devpts instance per execution (namespaces isolation), mounted over the
    sandbox's: with the sandbox's one /dev/pts, an execution opened a neighbour's pty,
    read the input its test typed and wrote a forged answer the test accepted
    (measured). Its own ptys work, and only they are listed."""
    if fs.isolation != "namespaces":  # pragma: no cover - hosts without mount namespaces
        pytest.skip("landlock isolation shares /dev/pts (documented)")
    for _ in range(2):
        res = fs.run_python(PTY)
        assert res.stdout == "2 b'hi\\n' ['0', 'ptmx']\n", res.stdout + res.stderr


@pytest.mark.parametrize("pid_namespace", [False, True])
def test_no_execution_can_lower_the_shared_pid_max(pid_namespace: bool):
    """``kernel/pid_max`` is per pid namespace since Linux 6.14 and writable by the uid
    owning it: one execution set the server's to 301 and every later execution failed
    to fork (EAGAIN) for the server's lifetime. ``/proc/sys`` is read-only."""
    write = ("import os\ntry:\n    open('/proc/sys/kernel/pid_max', 'w').write('301')\n"
             "except OSError:\n    pass\n"
             "for _ in range(320):\n    pid = os.fork()\n    if pid == 0:\n        os._exit(0)\n"
             "    os.waitpid(pid, 0)\n")
    with ForkServer(workers=1, pid_namespace=pid_namespace) as fs:
        assert fs.run_python(write).exit_code == 0
        for _ in range(3):
            res = fs.run_python("import os\nif os.fork() == 0:\n    os._exit(0)\nos.wait()\n"
                                "print(open('/proc/sys/kernel/pid_max').read().strip())")
            assert res.exit_code == 0 and res.stdout != "301\n", res


def test_a_forked_copy_of_the_host_gets_a_server_of_its_own():
    """A host process forked after using a ForkServer (multiprocessing, the scheduler's
    ProcessExecutor) sent its requests to the parent's server, where the parent's reader
    took the replies: it waited 41 s, then killed the parent's server as unresponsive.
    Now the fork starts a server of its own; the parent's keeps running, untouched."""
    import atexit

    with ForkServer(workers=1) as fs:
        assert fs.run_python("print(1)").stdout == "1\n"
        pid = os.fork()
        if pid == 0:
            code = 3
            try:
                t0 = time.monotonic()
                res = fs.run_python("print(2)", limits=Limits(timeout_s=10))
                code = 0 if res.stdout == "2\n" and time.monotonic() - t0 < 20 else 4
                fs.close()  # closes its own server only
                atexit._run_exitfuncs()  # as the fork's interpreter does when it exits
            except BaseException:
                code = 5
            os._exit(code)
        assert fs.run_python("print(3)").stdout == "3\n"  # while the fork runs its own
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert fs.run_python("print(4)").stdout == "4\n"
        assert fs.restarts == 0


# inotify_init1 until refused: how many instances one execution may hold
INOTIFY_HOG = r"""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
fds = []
while len(fds) < 1000:
    fd = libc.inotify_init1(0)
    if fd < 0:
        break
    fds.append(fd)
print(len(fds))
"""


@pytest.mark.parametrize("kw", [{"isolation": "namespaces"}, {"isolation": "landlock"},
                                {"pid_namespace": True}])
def test_no_execution_takes_the_hosts_inotify_instances(kw: dict):
    # counted per uid up to the host's user namespace, where the sandbox's count is
    # the host user's (root's): one execution took all 128, the host's own then failed
    from polyrl.sandbox._fs_isolation import INOTIFY_INSTANCES

    with ForkServer(preload=[], workers=1, **kw) as fs:
        res = fs.run_python(INOTIFY_HOG)
    assert res.exit_code == 0, res.stderr
    assert int(res.stdout) <= INOTIFY_INSTANCES
