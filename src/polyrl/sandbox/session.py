"""``SandboxSession``: a persistent workspace and cwd for multi-step episodes (shell tasks).

Each command is its own sandboxed execution (own limits, own process tree, killed when
it ends), but all share one workspace and the working directory persists: ``cd sub``
in one step is where the next step starts. Background processes and shell variables do
NOT persist between steps.

On the bwrap backend the workspace is a tmpfs the kernel bounds (``polyrl.sandbox.keeper``):
each step may add its ``max_file_mib`` MiB (and one file per 4 KiB of it) to what the
workspace holds, and gets ENOSPC past it (``limit_hit="max_file_mib"``), whatever it
does with its files. It takes the host's memory, not its disk, so the steps of one
session fill it up to ``keeper.SESSION_FACTOR`` (4) x ``max_file_mib`` in all (what the
host writes itself, ``write_file`` and ``restore``, is never cut). Where no keeper can be
made (a host that refuses this user a user namespace, or ``POLYRL_SESSION_TMPFS=0``),
the workspace is a host directory that the host measures while each step runs
(``polyrl.sandbox.diskguard``), which a program that means to can evade (see the
package docstring); ``SandboxSession.kernel_bounded`` is then False and
``kernel_unbounded_why`` says why, and a warning is issued once per process.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import threading
import uuid
import warnings
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING

from polyrl.errors import SandboxError
from polyrl.sandbox import keeper as keeper_mod
from polyrl.sandbox.hostview import SlotLock
from polyrl.sandbox.limits import Limits, resolve_limits
from polyrl.sandbox.utf8 import check_command
from polyrl.sandbox.workspace import Workspace, remove_tree
from polyrl.types import ExecResult

if TYPE_CHECKING:
    from polyrl.sandbox.sandbox import Sandbox

# Runs the step, then records the final cwd in a host-side control file.
_STEP = 'trap \'pwd > "$POLYRL_CTL/cwd"\' EXIT; cd -- "$POLYRL_CWD" 2>/dev/null || ' \
        'cd -- "$POLYRL_ROOT"; eval "$POLYRL_CMD"'


_warned = False


def _cleanup(workspace: Workspace, ctl: str, snap_dir: str, slot: SlotLock | None,
             keeper: keeper_mod.Keeper | None, owner_pid: int) -> None:
    if os.getpid() != owner_pid:  # a forked copy of the host exits: the session is not its
        return
    if keeper is not None:
        keeper.close()
        workspace.path = workspace.host_dir  # its descriptor is closed, its number free
    workspace.remove()
    shutil.rmtree(ctl, ignore_errors=True)
    shutil.rmtree(snap_dir, ignore_errors=True)
    if slot is not None:
        slot.release()


@dataclass(frozen=True)
class Snapshot:
    """A saved copy of a session's workspace and cwd (see ``SandboxSession.snapshot``)."""

    id: str
    path: str
    cwd: str


class SandboxSession:
    """Successive commands sharing one workspace and cwd. Use as a context manager.

    ``cwd`` is always reported as a sandbox path (``/workspace/...``), for both backends.

    Args:
        sandbox: the owning ``Sandbox`` (backend, transcript, python).
        limits: limits of every step (a step may override them).

    Attributes:
        kernel_bounded: whether the workspace is a tmpfs the kernel bounds (bwrap, see
            the module docstring); False: a host directory the host measures.
        kernel_unbounded_why: why not (None when it is, or on the process backend).

    Raises:
        SandboxError: the keeper of the workspace failed (not for want of a user
            namespace: then the session runs without it).
        SandboxUnavailableError: bwrap or (as root) the host view is not available.
    """

    def __init__(self, sandbox: Sandbox, limits: Limits) -> None:
        self.sandbox = sandbox
        self.limits = limits
        self._slot = SlotLock() if sandbox.use_private_uid else None
        uid = self._slot.uid if self._slot else None
        self._keeper: keeper_mod.Keeper | None = None
        self.kernel_unbounded_why: str | None = None
        try:
            self.workspace = Workspace(uid=uid)
            if sandbox.backend == "bwrap":
                self._keep_workspace()
        except BaseException:
            if hasattr(self, "workspace"):
                self.workspace.remove()
            if self._slot is not None:
                self._slot.release()
            raise
        self.kernel_bounded = self._keeper is not None
        self._ctl = tempfile.mkdtemp(prefix="polyrl-session-ctl-")
        if uid is not None:
            os.chmod(self._ctl, 0o700)
            os.chown(self._ctl, uid, uid)
        self._snap_dir = tempfile.mkdtemp(prefix="polyrl-session-snap-")
        self.cwd = "/workspace"
        self.closed = False
        # one step or host file operation at a time: a host write loosens the tmpfs
        # (keeper.loosen), which must never happen while a step runs
        self._busy = threading.RLock()
        # sessions that are never closed are still cleaned up when collected or at exit
        # (only by the process that opened it: a forked copy of the host that exits, or
        # collects its copy of this object, must not remove the workspace or stop the keeper)
        self._pid = os.getpid()
        self._finalizer = weakref.finalize(self, _cleanup, self.workspace, self._ctl,
                                           self._snap_dir, self._slot, self._keeper, self._pid)

    def _keep_workspace(self) -> None:
        """Cover the workspace with a keeper's tmpfs, or say (once) why it stays a host
        directory."""
        global _warned
        from polyrl.sandbox import bwrap as bwrap_backend

        view = bwrap_backend.host_view_for(self.sandbox.python) if self._slot else None
        owner = self._slot.slot if self._slot else os.getuid()
        self._keeper, why = keeper_mod.make_keeper(self.workspace.path, owner, view,
                                                   self.sandbox.python)
        if self._keeper is not None:
            self.workspace.path = self._keeper.root_path
            return
        self.kernel_unbounded_why = why
        if not _warned:
            _warned = True
            warnings.warn(f"sandbox sessions: the workspace is a host directory, measured "
                          f"by the host, not bounded by the kernel ({why})", RuntimeWarning,
                          stacklevel=4)

    # -------------------------------------------------------------- context manager
    def __enter__(self) -> SandboxSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Delete the workspace and snapshots; release the private uid. In a process
        forked after the session was opened: only forget it (the opener still owns it)."""
        if self.closed:
            return
        self.closed = True
        self._finalizer()

    def _check_open(self) -> None:
        if self.closed:
            raise SandboxError("session is closed")
        if os.getpid() != self._pid:  # its workspace path, keeper and lock are the opener's
            raise SandboxError(f"this session belongs to process {self._pid}, which opened "
                               f"it; a forked process ({os.getpid()}) must open its own")

    # ------------------------------------------------------------------ steps
    def run(self, command: str | list[str], *, stdin: bytes | str | None = None,
            limits: Limits | str | None = None, env: dict[str, str] | None = None,
            as_init: bool = False, ro_binds: list[tuple[str, str]] | None = None) -> ExecResult:
        """Run one step: a shell command string (``bash -c``) or an argv list, in the current cwd.

        For a string, the cwd after the command (``cd`` included) becomes the session's cwd.

        Args:
            ro_binds: bwrap only: ``(host_path, sandbox_path)`` mounted read-only for this
                step (a grader's test files, which the programs it runs cannot change).
            as_init: bwrap: run the step's program as pid 1 of its pid namespace instead
                of under the cold init (``polyrl.sandbox.coldinit``). The kernel then
                drops every signal sent to it from inside the namespace that it has no
                handler for, SIGKILL included: for a trusted grader that runs untrusted
                programs (``kill(-1, SIGKILL)`` by one of them cannot cut its report
                short). It also ignores the signals it sends itself and reaps no orphan
                it does not wait for.

        Raises:
            SandboxError / SandboxUnavailableError: the sandbox failed (not the command).
            ValueError: ``ro_binds`` on the process backend (it has no mounts).
            ConfigError: an argument or ``env`` entry no program can be given (a NUL
                byte, no UTF-8 bytes, a name with ``=``: ``utf8.check_command``).
        """
        if ro_binds and self.sandbox.backend != "bwrap":
            raise ValueError("ro_binds needs the bwrap backend")
        with self._busy:
            return self._run(command, stdin=stdin, limits=limits, env=env, as_init=as_init,
                             ro_binds=ro_binds)

    def _run(self, command: str | list[str], *, stdin: bytes | str | None,
             limits: Limits | str | None, env: dict[str, str] | None,
             as_init: bool, ro_binds: list[tuple[str, str]] | None) -> ExecResult:
        self._check_open()
        binds = [(host, inside, False) for host, inside in ro_binds or []]
        lim = resolve_limits(limits, self.limits)
        check_command([command] if isinstance(command, str) else command, env)
        isolated = self.sandbox.backend == "bwrap"
        root = "/workspace" if isolated else self.workspace.path
        namespaces = None
        if self._keeper is not None:
            self._keeper.resize(lim.max_file_mib)
            namespaces = self._keeper.namespaces
        self._reopen_root()
        if isinstance(command, str):
            cwd_file = self._fresh_cwd_file()
            inner_cwd = self.cwd.replace("/workspace", root, 1)
            step_env = dict(env or {}, POLYRL_CWD=inner_cwd, POLYRL_CMD=command,
                            POLYRL_ROOT=root, POLYRL_CTL="/run/polyrl" if isolated else self._ctl)
            res = self.sandbox._execute(
                ["bash", "-c", _STEP], lim, self.workspace, self._slot, cwd=root, stdin=stdin,
                env=step_env, namespaces=namespaces, as_init=as_init,
                extra_binds=[(cwd_file, "/run/polyrl/cwd", True), *binds] if isolated else None)
            res.argv = ["bash", "-c", command]
            self._update_cwd(cwd_file, root)
        else:
            res = self.sandbox._execute(command, lim, self.workspace, self._slot,
                                        cwd=self.cwd.replace("/workspace", root, 1),
                                        stdin=stdin, env=env, namespaces=namespaces,
                                        as_init=as_init, extra_binds=binds or None)
        self.sandbox._record(res, lim, "session")
        return res

    def _reopen_root(self) -> None:
        """Give the workspace root back the session's mode, 0700: the root's mode is the
        session's, not a step's. After a step's ``chmod 000 /workspace`` no later step
        could start in it (bwrap: Can't chdir), and a non-root host (no DAC override)
        could neither read, write, snapshot nor restore it (EACCES). Through the keeper's
        descriptor link itself, not ``<link>/.``: resolving ``.`` needs search permission
        on the root."""
        os.chmod(self.workspace.path.removesuffix("/."), 0o700)

    def _fresh_cwd_file(self) -> str:
        """An empty control file for the next step's cwd, owned by the sandbox's uid.

        Only this one file is bound into the sandbox (at ``/run/polyrl/cwd``), never its
        directory: a bound host directory is one that nothing measures (measured: 1 GB
        and 3,000 files written there by one step under a 4 MiB budget, kept until the
        session closed). One file is capped by ``RLIMIT_FSIZE`` and emptied each step."""
        cwd_file = os.path.join(self._ctl, "cwd")
        if os.path.lexists(cwd_file):  # the process backend's last step may have made it a dir
            if os.path.isdir(cwd_file) and not os.path.islink(cwd_file):
                remove_tree(cwd_file)
            else:
                os.unlink(cwd_file)
        fd = os.open(cwd_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                     | os.O_CLOEXEC, 0o600)
        try:
            if self._slot is not None:
                os.fchown(fd, self._slot.uid, self._slot.uid)
        finally:
            os.close(fd)
        return cwd_file

    def _update_cwd(self, cwd_file: str, root: str) -> None:
        # the program writes the control file (the process backend: its directory): a
        # fifo there must not block us (O_NONBLOCK), nor a directory or a link stop us
        try:
            fd = os.open(cwd_file, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return  # killed before the trap ran (or not a file): keep the old cwd
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return
            text = os.read(fd, 4096).decode("utf-8", "replace").strip()
        except OSError:
            return
        finally:
            os.close(fd)
        if text == root or text.startswith(root + "/"):
            self.cwd = "/workspace" + text[len(root):]

    # ------------------------------------------------------------------ files
    def write_file(self, path: str, content: str | bytes) -> None:
        """Write one workspace file (path relative to the workspace root)."""
        with self._busy:
            self._check_open()
            if self._keeper is not None:
                self._keeper.loosen()
            self._reopen_root()
            self.workspace.write_files({path: content})

    def read_file(self, path: str) -> bytes:
        """Read one workspace file (never through a symlink).

        Raises:
            FileNotFoundError, SandboxError (symlink / not a regular file / too big).
        """
        self._check_open()
        with self._busy:
            self._reopen_root()
        return self.workspace.read_file(path)

    # -------------------------------------------------------------- snapshots
    def snapshot(self) -> Snapshot:
        """Save the workspace tree and cwd; returns a handle for :meth:`restore`.

        Links stay links, holes stay holes, named pipes are made anew; sockets and device
        nodes (no data) are left out (``Workspace.snapshot_to``).

        Raises:
            SandboxError: the session is closed, or the tree could not be copied (an
                unreadable file, a tree deeper than Python's recursion limit).
        """
        self._check_open()
        sid = uuid.uuid4().hex[:12]
        dest = os.path.join(self._snap_dir, sid)
        with self._busy:
            self._reopen_root()
        self.workspace.snapshot_to(dest)
        return Snapshot(id=sid, path=dest, cwd=self.cwd)

    def restore(self, snap: Snapshot) -> None:
        """Reset the workspace and cwd to ``snap`` (taken from this session).

        Raises:
            SandboxError: the snapshot is not from this session or was deleted.
        """
        self._check_open()
        # its folder is named by its id, directly in ours: a path through ".." (or a
        # link) that merely starts with our folder would copy a host tree in
        if (not snap.id.isalnum() or snap.path != os.path.join(self._snap_dir, snap.id)
                or os.path.islink(snap.path) or not os.path.isdir(snap.path)):
            raise SandboxError(f"snapshot {snap.id} does not belong to this session")
        with self._busy:
            self._check_open()
            if self._keeper is not None:
                self._keeper.loosen()
            self._reopen_root()
            self.workspace.restore_from(snap.path)
            self.cwd = snap.cwd
