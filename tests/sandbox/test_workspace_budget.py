"""A workspace on the host may grow by ``max_file_mib`` per execution, not by a disk.

``RLIMIT_FSIZE`` caps one file; these programs write file after file, each under it.
Before the ``DiskGuard``, the warm path wrote ~10 GB in the 20 s of its wall limit.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from polyrl.errors import SandboxError
from polyrl.sandbox import Limits, Sandbox
from polyrl.sandbox.diskguard import DiskGuard, tree_usage

from .conftest import is_warm

# 1 MiB files, every one under the 4 MiB file size limit; 200 MiB at most (should the
# guard fail), then waits to be killed
FILL = """
import os, time
for i in range(200):
    with open(f"f{i}", "wb") as f:
        f.write(b"x" * (1 << 20))
time.sleep(30)
"""
# many empty files: no bytes to speak of, but inodes
MANY = """
import os, time
for i in range(50000):
    os.close(os.open(f"e{i}", os.O_CREAT | os.O_WRONLY))
time.sleep(30)
"""
# files unlinked but kept open: no name in the tree, blocks on the disk
UNLINKED = """
import os, time
fds = []
for i in range(200):
    fd = os.open(f"u{i}", os.O_CREAT | os.O_WRONLY)
    os.unlink(f"u{i}")
    os.write(fd, b"x" * (1 << 20))
    fds.append(fd)
time.sleep(30)
"""
# within the budget, and slow enough to be measured several times
WITHIN = """
import time
for i in range(3):
    with open(f"f{i}", "wb") as f:
        f.write(b"x" * (1 << 20))
time.sleep(0.5)
print("done")
"""
LIM = Limits(timeout_s=10, max_file_mib=4)


def _assert_stopped(res, what: str, *, by_kernel: bool = False) -> None:
    """Killed by the measure (a host directory), or refused by the kernel (a warm
    sandbox's tmpfs: ENOSPC, the program fails); either way well before timeout_s."""
    assert res.limit_hit == "max_file_mib", (what, res.limit_hit, res.stderr[-500:])
    if by_kernel:
        assert res.exit_code == 1 and "No space left on device" in res.stderr, res
    else:
        assert res.signal == 9 and res.exit_code is None, (res.exit_code, res.signal)
    assert res.wall_s < 5, res.wall_s  # stopped within a few checks, not at timeout_s


@pytest.mark.timeout(120)
@pytest.mark.parametrize("program", [FILL, MANY, UNLINKED], ids=["bytes", "inodes", "unlinked"])
def test_a_workspace_stops_growing_at_its_budget(sb: Sandbox, program: str):
    """Warm (/workspace is a tmpfs of 2 x max_file_mib, inputs included: the kernel
    refuses more) and cold (a host directory, measured): the program is stopped once
    the workspace grew past max_file_mib MiB
    or one file per 4 KiB of it; a program within the budget is untouched."""
    _assert_stopped(sb.run_python(program, limits=LIM), "run", by_kernel=is_warm(sb))
    ok = sb.run_python(WITHIN, limits=LIM)
    assert (ok.exit_code, ok.limit_hit, ok.stdout) == (0, None, "done\n"), ok.stderr


@pytest.mark.timeout(60)
def test_process_backend_workspace_budget():
    box = Sandbox(backend="process", limits=LIM)
    _assert_stopped(box.run_python(FILL), "process")
    _assert_stopped(box.run_python(UNLINKED), "process unlinked")
    assert box.run_python(WITHIN).stdout == "done\n"


@pytest.mark.timeout(60)
def test_session_budget_counts_from_what_the_workspace_held(sb: Sandbox):
    """Each command of a session may add max_file_mib to what the workspace already
    holds: earlier commands' files are not charged again. On bwrap the kernel bounds it
    (the session's tmpfs is resized before each step: ENOSPC), elsewhere the host's
    measure kills the step."""
    with sb.session(limits=LIM) as s:
        s.write_file("within.py", WITHIN)
        s.write_file("fill.py", FILL)
        for i in range(3):  # 3 x 3 MiB kept: more than one budget in all
            res = s.run(f"{sb.python} within.py && mkdir -p k{i} && mv f? k{i}/")
            assert (res.exit_code, res.limit_hit) == (0, None), res.stderr
        _assert_stopped(s.run([sb.python, "fill.py"]), "session", by_kernel=s.kernel_bounded)
        assert s.kernel_bounded


def test_tree_usage_counts_blocks_and_names_without_following_links(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "f").write_bytes(b"x" * 100_000)
    (tmp_path / "link").symlink_to("/usr")  # never followed
    used, names = tree_usage(str(tmp_path))
    du = int(subprocess.run(["du", "-s", "-B1", str(tmp_path)], capture_output=True,
                            text=True, check=True).stdout.split()[0])
    assert names == 3
    assert used == du - os.stat(tmp_path).st_blocks * 512  # du counts the root itself
    assert tree_usage(str(tmp_path), stop_entries=1) == (
        tree_usage(str(tmp_path), stop_entries=1)[0], 2)  # stops at the first name past


def test_tree_usage_holds_one_directory_open_at_a_time(tmp_path):
    """A program may nest directories deeper than the host's open file limit."""
    fd = os.open(tmp_path, os.O_RDONLY)
    for _ in range(300):
        os.mkdir("d", dir_fd=fd)
        sub = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = sub
    os.close(fd)
    code = (f"import resource, sys; sys.path[:0] = {sys.path!r}\n"
            "from polyrl.sandbox.diskguard import tree_usage\n"
            "resource.setrlimit(resource.RLIMIT_NOFILE, (32, 32))  # 300 levels: 300 fds\n"
            f"print(tree_usage({str(tmp_path)!r})[1])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout == "300\n", out.stderr


def test_what_cannot_be_measured_is_not_granted():
    """A directory the walker cannot list (as a non-root host cannot, once the program
    removed its permissions) counts as infinitely large; found at the start (an earlier
    session step made it), it made the budget inf + budget: never passed (240 MiB
    written under 16). The first measure fails instead."""
    tmp_path = Path(tempfile.mkdtemp())  # pytest's is beneath a 0700 directory of root's
    (tmp_path / "hidden").mkdir()
    (tmp_path / "hidden" / "big").write_bytes(b"x" * 4096)
    os.chmod(tmp_path / "hidden", 0)
    os.chmod(tmp_path, 0o755)
    code = (f"import os, sys; sys.path[:0] = {sys.path!r}\n"
            "from polyrl.sandbox.diskguard import DiskGuard, tree_usage\n"
            "if os.geteuid() == 0: os.setuid(65534)\n"
            f"print(tree_usage({str(tmp_path)!r}))\n"
            f"DiskGuard({str(tmp_path)!r}, 4)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    os.chmod(tmp_path / "hidden", 0o700)
    shutil.rmtree(tmp_path)
    assert out.stdout.strip() == "(inf, inf)", out.stderr
    assert "cannot be listed" in out.stderr, out.stderr


def test_disk_guard_budget_is_on_top_of_the_start(tmp_path):
    (tmp_path / "input").write_bytes(b"x" * (3 << 20))
    guard = DiskGuard(str(tmp_path), 1)
    assert not guard.over()
    (tmp_path / "out").write_bytes(b"x" * (900 << 10))
    assert not guard.over()
    (tmp_path / "out2").write_bytes(b"x" * (200 << 10))
    assert guard.over()


def test_hard_links_count_once_and_stay_links_in_snapshots(sb: Sandbox):
    """200 names of one 3 MiB file: 3 MiB of the budget, and a snapshot of 3 MiB (each
    name was copied in full: 200 x the data on the host's disk)."""
    with sb.session(limits=LIM) as s:
        res = s.run("head -c 3M /dev/zero > a && for i in $(seq 200); do ln a l$i; done; "
                    "sleep 0.3")
        assert (res.exit_code, res.limit_hit) == (0, None), res.stderr
        snap = s.snapshot()
        used, names = tree_usage(snap.path)
        assert names == 201 and used < 4 << 20, (names, used)
        s.run("rm -f a l*")
        s.restore(snap)
        st = os.stat(os.path.join(s.workspace.path, "l7"))
        assert st.st_nlink == 201 and st.st_size == 3 << 20


def test_the_walk_never_climbs_out_of_a_tree_that_moved(tmp_path, monkeypatch):
    """A directory moved while the walk is inside it: ``..`` is its new parent (from
    a/b/c/d/e moved to the root, four levels above the workspace: the host's ``/``, as
    root, was walked). The walk notices and returns None; three such walks in a row
    count as over budget."""
    import polyrl.sandbox.diskguard as usage

    ws = tmp_path / "ws"
    deep = ws / "a" / "b" / "c" / "d" / "e"
    deep.mkdir(parents=True)
    (deep / "f").write_bytes(b"x")
    real = os.listdir

    def listdir(fd):  # the program moves e to the top while the walk lists it
        names = real(fd)
        if isinstance(fd, int) and os.readlink(f"/proc/self/fd/{fd}").endswith("/d/e"):
            os.rename(deep, tmp_path / "e")
        return names

    monkeypatch.setattr(usage.os, "listdir", listdir)
    assert usage.tree_usage(str(ws)) is None
    monkeypatch.setattr(usage.os, "listdir", real)
    (tmp_path / "e").rename(deep)
    guard = DiskGuard(str(ws), 1)
    monkeypatch.setattr(usage, "tree_usage", lambda *a: None)
    assert [guard.over() for _ in range(3)] == [False, False, True]


@pytest.mark.timeout(60)
def test_the_host_keeps_its_disk_reserve_whatever_the_budget(monkeypatch):
    """Data hidden from the walk (renames timed by inotify, files in flight on a unix
    socket) still takes the host's disk: when the workspace's filesystem falls below
    its reserve, the execution is stopped however large its own budget."""
    import polyrl.sandbox.diskguard as usage
    from polyrl.sandbox.workspace import _base_dir

    vfs = os.statvfs(_base_dir())
    free = vfs.f_bavail * vfs.f_frsize
    size = vfs.f_blocks * vfs.f_frsize
    if free < 1 << 30:  # pragma: no cover - a nearly full host
        pytest.skip("less than 1 GiB free here")
    # the reserve: 100 MiB less than what is free now (the host-side guard reads these)
    monkeypatch.setattr(usage, "RESERVE_FRACTION", (free - (100 << 20)) / size)
    monkeypatch.setattr(usage, "RESERVE_MAX_BYTES", free)
    box = Sandbox(backend="process", limits=Limits(timeout_s=20, max_file_mib=4096))
    res = box.run_python(FILL.replace("range(200)", "range(400)"))
    assert res.limit_hit == "max_file_mib" and res.wall_s < 10, res
    monkeypatch.setattr(usage, "RESERVE_FRACTION", min(1.0, (free + (1 << 30)) / size))
    monkeypatch.setattr(usage, "RESERVE_MAX_BYTES", free + (1 << 30))
    with pytest.raises(SandboxError, match="reserve"):
        box.run_python("pass")  # below it already: nothing starts


MAPPED = r"""
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
for i in range(60):  # 3 MiB files, mapped, unlinked, closed: in no directory, no fd
    fd = os.open(f"m{i}", os.O_CREAT | os.O_RDWR)
    os.ftruncate(fd, 3 << 20)
    addr = libc.mmap(None, 3 << 20, 3, 1, fd, 0)  # PROT_READ | PROT_WRITE, MAP_SHARED
    ctypes.memset(addr, 120, 3 << 20)
    os.close(fd)
    os.unlink(f"m{i}")
time.sleep(30)
"""


@pytest.mark.timeout(60)
def test_files_mapped_and_unlinked_count_on_a_root_host():
    """Read through /proc/<pid>/map_files, which needs CAP_SYS_ADMIN: the host as
    root sees them (cold and process executions); a warm sandbox's server does not."""
    if os.geteuid() != 0:  # pragma: no cover - CI runs as root
        pytest.skip("map_files needs root")
    for backend in ("process", "bwrap"):
        box = Sandbox(backend=backend, warm=False, limits=Limits(timeout_s=10, max_file_mib=8))
        _assert_stopped(box.run_python(MAPPED), backend)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("where", ["/tmp", "/dev/shm"])
def test_a_cold_sandbox_tmpfs_is_bounded_in_files_too(where: str):
    """bwrap sizes a cold execution's /tmp and /dev/shm but cannot cap their inodes
    (~100,000 empty files/s of kernel memory no limit counted): the host counts them
    through /proc/<pid>/root, one file per 4 KiB of max_file_mib, as the warm and
    fork-server tmpfs cap them."""
    many = MANY.replace('f"e{i}"', f'f"{where}/e{{i}}"')
    box = Sandbox(backend="bwrap", warm=False, limits=LIM)
    _assert_stopped(box.run_python(many), where)
    assert box.run_python(WITHIN).stdout == "done\n"


def test_a_warm_workspace_is_a_tmpfs_the_kernel_bounds(sb: Sandbox):
    """Data hidden from a walk (renames timed to it, files in flight on a unix socket)
    still takes the tmpfs: 2 x max_file_mib in all, inputs included; more input than
    max_file_mib runs cold."""
    if not is_warm(sb):
        pytest.skip("cold: a host directory (measured)")
    code = ("import os; v = os.statvfs('/workspace'); "
            "print(v.f_blocks * v.f_frsize >> 20, sorted(os.listdir('.')))")
    res = sb.run_python(code, limits=LIM, files={"in.txt": "x"})
    assert res.stdout == "8 ['in.txt']\n", res.stdout + res.stderr
    big = {"big.bin": b"x" * (5 << 20)}  # over max_file_mib: cold, a host directory
    res = sb.run_python(code, limits=LIM, files=big)
    assert res.exit_code == 0 and not res.stdout.startswith("8 "), res.stdout


MAPS = r"""
import ctypes, os, time
d = "/workspace"
for i in range(15):  # a 3.8 KiB path: each line of /proc/<pid>/maps as long
    d += "/" + "a" * 250
    os.makedirs(d)
open(d + "/f", "wb").write(b"x" * 4096)
libc = ctypes.CDLL(None)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
for _ in range(2):
    if os.fork() == 0:
        fd = os.open(d + "/f", os.O_RDONLY)
        start = libc.mmap(None, 60000 * 4096, 1, 2, fd, 0)
        for i in range(30000):  # every other page inaccessible: 60,000 mappings
            libc.mprotect(ctypes.c_void_p(start + (2 * i + 1) * 4096), 4096, 0)
        time.sleep(30)
        os._exit(0)
time.sleep(30)
"""


@pytest.mark.timeout(60)
def test_a_costly_proc_scan_neither_holds_the_host_nor_outlasts_the_wall_limit():
    """The guard reads each process's /proc/<pid>/maps: 2 processes of 60,000 mappings
    of a file with a long path are 460 MB of text to produce. It held the host's
    thread (and the wall limit, checked between scans) for 9.3 s of a 4 s limit (8
    processes: 31 s, 28 s of the host's CPU); a scan now stops after SCAN_BUDGET_S."""
    import time

    box = Sandbox(limits=Limits(timeout_s=1.5, cpu_s=10, max_pids=16), warm=False)
    with box.session() as s:
        s.write_file("maps.py", MAPS)
        cpu = time.thread_time()
        res = s.run("python3 maps.py")
        cpu = time.thread_time() - cpu
    assert res.limit_hit in ("timeout_s", "max_file_mib"), res
    assert res.wall_s < 3.0 and cpu < 2.0, (res.wall_s, cpu)
