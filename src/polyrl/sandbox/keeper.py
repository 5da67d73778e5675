"""A session workspace the kernel bounds: a tmpfs in a mount namespace kept per session.

A session's steps are cold bwrap executions that bind a host directory at
``/workspace``. Without more, only the host's walk (``polyrl.sandbox.diskguard``)
bounds what a step writes there, and a program that means to can hide data from a
walk (renames timed by inotify, files in flight on a unix socket). A ``Keeper`` is a
small process that makes a mount namespace in which a tmpfs covers the session's
workspace directory (as root: a copy of the host view's, in its user namespace; else
in a user namespace of its own mapping our uid to itself). Each step's bwrap starts in
that namespace (``setns``, see ``bwrap.prepare(namespaces=...)``), so its ``--bind
<workspace> /workspace`` binds the tmpfs; the host reaches the files through a
descriptor of the tmpfs root (``Keeper.root_path``, never a path another process of
the host could swap).

Size: before each step the keeper sets the tmpfs to what it holds plus the step's
budget (``resize``): ``max_file_mib`` MiB and one inode per 4 KiB of it (at least
1024), the semantics of a session (each step may add ``max_file_mib`` to what the
workspace holds) now enforced by the kernel: the program gets ENOSPC, whatever it does
with its files (unlinked and open, in flight, renamed). A tmpfs takes the host's
memory, so the steps of one session fill it up to ``SESSION_FACTOR x max_file_mib`` in
all (256 MiB with the default limits: what a warm sandbox's ``/workspace``, ``/tmp``
and ``/dev/shm`` may hold together); what the host itself wrote counts and is never
cut. Between steps the host's own writes (``write_file``, ``restore``) get room first
(``loosen``): nothing of the sandbox runs then.

Lifetime: the host holds the namespace and the tmpfs by descriptors only; the keeper
process exits when its stdin closes (``close()``, or the host process dies) and on the
death of the host (``PR_SET_PDEATHSIG``, started from a thread that lives as long as
the process): nothing is left, no process, no mount.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading

from polyrl.errors import SandboxError

LOOSE_BYTES = 1 << 40  # the size between steps (host writes only); finite: a tmpfs
LOOSE_INODES = 1 << 24  # made unlimited can never be limited again
INODE_BYTES = 4096  # one inode per 4 KiB of budget, as every sandbox tmpfs
MIN_INODES = 1024
SESSION_FACTOR = 4  # the steps of a session fill its tmpfs up to this x max_file_mib
REFUSED_ERRNOS = (1, 13, 28, 87)  # EPERM, EACCES, ENOSPC, EUSERS: no user namespace here
DISABLE_ENV = "POLYRL_SESSION_TMPFS"
"""``POLYRL_SESSION_TMPFS=0`` keeps session workspaces on the host's disk (measured by
the host, as before): for hosts whose RAM is scarcer than their disk."""

# The keeper: enters (root) or makes (others) a user namespace, makes a mount namespace
# with a tmpfs over the workspace, says "ready", then resizes it on request (a line
# "ADD_BYTES ADD_INODES CAP_BYTES CAP_INODES": size = used + ADD, at most CAP unless
# more is used already) until its stdin closes.
_KEEPER = r"""
import ctypes, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
spec = json.loads(sys.argv[1])
def fail(code, what):
    e = ctypes.get_errno()
    sys.stdout.write("%s %d %s: %s\n" % (code, e, what, os.strerror(e))); sys.stdout.flush()
    os._exit(1)
libc.prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG: SIGKILL when the starting thread dies
if os.getppid() != spec["parent"]:
    os._exit(1)
if spec["userns_fd"] >= 0:  # root: the host view's user namespace, a copy of its mounts
    if libc.setns(spec["userns_fd"], 0x10000000) != 0:
        fail("error", "setns(user)")
    if libc.setns(spec["mntns_fd"], 0x00020000) != 0:
        fail("error", "setns(mnt)")
    if libc.unshare(0x00020000) != 0:
        fail("error", "unshare(mnt)")
else:
    if libc.unshare(0x10000000) != 0:
        refused = ctypes.get_errno() in spec["refused"]
        fail("unavailable" if refused else "error", "unshare(user)")
    if libc.unshare(0x00020000) != 0:
        fail("error", "unshare(mnt)")
    for name, text in (("setgroups", "deny"), ("uid_map", "%d %d 1" % ((spec["uid"],) * 2)),
                       ("gid_map", "%d %d 1" % ((spec["gid"],) * 2))):
        with open("/proc/self/" + name, "w") as f:
            f.write(text)
libc.prctl(4, 1, 0, 0, 0)  # dumpable: the host opens our /proc/<pid>/root and ns files
if libc.mount(b"none", b"/", None, (1 << 14) | (1 << 18), None) != 0:
    fail("error", "make / private")  # MS_REC | MS_PRIVATE
path = spec["path"].encode()
opts = "size=%d,nr_inodes=%d,mode=0700,uid=%d,gid=%d" % (
    spec["size"], spec["inodes"], spec["owner"], spec["owner"])
if libc.mount(b"tmpfs", path, b"tmpfs", 2 | 4, opts.encode()) != 0:  # NOSUID | NODEV
    fail("error", "mount tmpfs")
sys.stdout.write("ready\n"); sys.stdout.flush()
for line in sys.stdin:
    add, add_inodes, cap, cap_inodes = (int(x) for x in line.split())
    v = os.statvfs(path)
    used, used_inodes = (v.f_blocks - v.f_bfree) * v.f_frsize, v.f_files - v.f_ffree
    size = max(used, min(used + add, cap))
    inodes = max(used_inodes, min(used_inodes + add_inodes, cap_inodes))
    opts = ("size=%d,nr_inodes=%d" % (size, inodes)).encode()
    if libc.mount(b"none", path, None, 32 | 2 | 4, opts) != 0:  # MS_REMOUNT
        fail("error", "remount tmpfs")
    sys.stdout.write("ok %d %d\n" % (size, inodes)); sys.stdout.flush()
"""


class KeeperUnavailable(Exception):
    """The kernel refuses what a keeper needs (no user namespace for this user)."""


def disabled() -> bool:
    """Whether ``POLYRL_SESSION_TMPFS=0`` asks for host-directory session workspaces."""
    return os.environ.get(DISABLE_ENV, "1").strip().lower() in ("0", "no", "off", "false")


def step_budget(max_file_mib: float) -> tuple[int, int]:
    """``(bytes, inodes)`` a step with this ``max_file_mib`` may add to the tmpfs."""
    size = int(max_file_mib * 1024 * 1024)
    return size, max(MIN_INODES, size // INODE_BYTES)


class Keeper:
    """A tmpfs over ``path`` in a mount namespace of its own (see the module docstring).

    Args:
        path: the workspace directory (an existing, empty host directory).
        owner: the uid that owns the tmpfs root, as seen in the keeper's user
            namespace (the slot inside the host view; else our own uid).
        view: the host view (root), or None (a user namespace of our own).
        python: the interpreter that runs the keeper.

    Attributes:
        namespaces: ``(userns_fd, mntns_fd)`` for ``bwrap.prepare(namespaces=...)``.
        root_path: a path of the tmpfs root for the host (``/proc/<our pid>/fd/<fd>/.``).

    Raises:
        KeeperUnavailable: this user cannot make a user namespace here.
        SandboxError: anything else failed (nothing is left behind).
    """

    def __init__(self, path: str, owner: int, view: object | None, python: str) -> None:
        from polyrl.sandbox.forkserver import _long_lived_thread

        self.path = path
        self._lock = threading.Lock()
        self._fds: list[int] = []
        self.loose = True
        userns = getattr(view, "userns_fd", -1)
        mntns = getattr(view, "mntns_fd", -1)
        spec = {"parent": os.getpid(), "userns_fd": userns, "mntns_fd": mntns, "path": path,
                "uid": os.getuid(), "gid": os.getgid(), "owner": owner,
                "size": LOOSE_BYTES, "inodes": LOOSE_INODES, "refused": REFUSED_ERRNOS}
        # PR_SET_PDEATHSIG is per thread: start it from one that lives as the process
        try:
            self.proc = _long_lived_thread().submit(
                subprocess.Popen, [python, "-S", "-c", _KEEPER, json.dumps(spec)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                cwd="/", env={"PATH": "/usr/bin:/bin"}, text=True,
                pass_fds=tuple(fd for fd in (userns, mntns) if fd >= 0)).result()
        except (OSError, subprocess.SubprocessError) as e:
            raise SandboxError(f"session workspace keeper could not start: {e}") from e
        try:
            line = self._read()
            if line.startswith("unavailable"):
                raise KeeperUnavailable(line.split(" ", 2)[-1])
            if line != "ready":
                raise SandboxError(f"session workspace keeper failed: {line or 'no answer'}")
            pid = self.proc.pid  # our unreaped child: its pid cannot be reused yet
            for name in ("ns/user", "ns/mnt"):
                self._fds.append(os.open(f"/proc/{pid}/{name}", os.O_RDONLY | os.O_CLOEXEC))
            self._fds.append(os.open(f"/proc/{pid}/root{path}", os.O_RDONLY | os.O_DIRECTORY
                                     | os.O_NOFOLLOW | os.O_CLOEXEC))
            vfs = os.fstatvfs(self._fds[2])
            if vfs.f_blocks * vfs.f_frsize != LOOSE_BYTES:
                raise SandboxError(f"session workspace keeper: {path} is no tmpfs of ours")
        except BaseException:
            self.close()
            raise
        self.namespaces = (self._fds[0], self._fds[1])
        self.root_path = f"/proc/{os.getpid()}/fd/{self._fds[2]}/."

    def _read(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().strip()

    def _remount(self, add_bytes: int, add_inodes: int, cap_bytes: int = LOOSE_BYTES,
                 cap_inodes: int = LOOSE_INODES) -> None:
        with self._lock:
            if self.proc.poll() is not None or self.proc.stdin is None:
                raise SandboxError("session workspace keeper is gone")
            try:
                self.proc.stdin.write(f"{add_bytes} {add_inodes} {cap_bytes} {cap_inodes}\n")
                self.proc.stdin.flush()
            except OSError as e:
                raise SandboxError(f"session workspace keeper is gone: {e}") from e
            line = self._read()
            if not line.startswith("ok "):
                raise SandboxError(f"cannot resize the session workspace: {line or 'no answer'}")

    def resize(self, max_file_mib: float) -> None:
        """Bound the tmpfs to what it holds plus one step's budget (``step_budget``),
        and to ``SESSION_FACTOR`` budgets in all (unless it holds more already).

        Raises:
            SandboxError: the keeper is gone or the kernel refused the new size.
        """
        add, add_inodes = step_budget(max_file_mib)
        self._remount(add, add_inodes, SESSION_FACTOR * add, SESSION_FACTOR * add_inodes)
        self.loose = False

    def loosen(self) -> None:
        """Give the host's own writes room (between steps only).

        Raises:
            SandboxError: the keeper is gone or the kernel refused the new size.
        """
        if not self.loose:
            self._remount(LOOSE_BYTES, LOOSE_INODES)
            self.loose = True

    def close(self) -> None:
        """Stop the keeper and drop the namespace and the tmpfs (idempotent)."""
        fds, self._fds = self._fds, []
        for fd in fds:
            os.close(fd)
        proc = self.proc
        if proc.stdin is not None:
            try:
                proc.stdin.close()
            except OSError:
                pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def make_keeper(path: str, owner: int, view: object | None,
                python: str | None = None) -> tuple[Keeper | None, str | None]:
    """``(keeper, None)``, or ``(None, why)`` where none can be made here (disabled by
    ``POLYRL_SESSION_TMPFS=0``, or no user namespace for this user).

    Raises:
        SandboxError: the keeper failed for another reason (never silently ignored).
    """
    if disabled():
        return None, f"{DISABLE_ENV}=0"
    try:
        return Keeper(path, owner, view, python or sys.executable), None
    except KeeperUnavailable as e:
        return None, f"no user namespace for this user: {e}"
