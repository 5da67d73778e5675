"""Isolation of one fork-server execution (stdlib only; runs INSIDE the sandbox).

Not imported: ``forkserver.py`` sends this file's text followed by ``_fs_server.py``'s as
one program (``python -c``), so the server finds these names defined. ``landlock``: an own
user namespace + a Landlock domain (read/execute on system paths, read/write only beneath
the job directory; ABI >= 6 also scopes signals and abstract unix sockets), every
capability dropped. ``namespaces`` (fallback): user + mount namespace, the job directory
bound at ``/workspace`` and a fresh tmpfs at ``/tmp``. See ``_fs_server.py``.
"""

import ctypes
import os
import shutil
import struct

ROOT = "/tmp/fs"
_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall

# Landlock (include/uapi/linux/landlock.h; x86_64 and aarch64 share these numbers)
_SYS_CREATE, _SYS_ADD_RULE, _SYS_RESTRICT = 444, 445, 446
_SYS_CAPSET = 126 if os.uname().machine == "x86_64" else 91
_FS_EXECUTE, _FS_WRITE_FILE, _FS_READ_FILE, _FS_READ_DIR = 1, 2, 4, 8
_FS_RIGHTS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1,
                     4: (1 << 15) - 1, 5: (1 << 16) - 1}
_FS_IOCTL_DEV = 1 << 15
_FS_MAKE_DEVICES = (1 << 6) | (1 << 11)  # MAKE_CHAR, MAKE_BLOCK
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1, 2
_RO = _FS_EXECUTE | _FS_READ_FILE | _FS_READ_DIR


class Landlock:
    """A Landlock policy prepared once in the server and applied by each child.

    The read-only rules (one per top-level entry of ``/`` but ``/tmp``, opened here as
    ``O_PATH`` fds) are packed once; a child adds one read/write rule for its own job
    directory and restricts itself (``apply``). ``abi`` is the kernel's Landlock ABI.
    """

    def __init__(self, abi):
        self.abi = abi
        self.fs_all = _FS_RIGHTS_BY_ABI.get(abi, _FS_RIGHTS_BY_ABI[5])
        scoped = (_SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL) if abi >= 6 else 0
        attr = struct.pack("=QQQ", self.fs_all, 0, scoped)
        self.attr_size = 24 if abi >= 6 else (16 if abi >= 4 else 8)
        self.attr = ctypes.create_string_buffer(attr[:self.attr_size], self.attr_size)
        self.rules = []
        for name in sorted(os.listdir("/")):
            if name in ("tmp", "workspace"):
                continue  # /tmp holds every execution's directory; /workspace is unused
            path = "/" + name
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            os.set_inheritable(fd, False)
            rights = _RO
            if name == "dev":  # /dev/null, /dev/urandom, ... (no new nodes)
                rights |= _FS_WRITE_FILE | (_FS_IOCTL_DEV if abi >= 5 else 0)
            if not os.path.isdir(path):  # a file: only the rights that apply to files
                rights &= _FS_EXECUTE | _FS_READ_FILE
            self.rules.append((fd, ctypes.create_string_buffer(
                struct.pack("=Qi", rights & self.fs_all, fd), 12)))
        if os.path.isdir("/dev/shm"):  # POSIX semaphores (multiprocessing), as before
            fd = os.open("/dev/shm", os.O_PATH | os.O_CLOEXEC)
            self.rules.append((fd, ctypes.create_string_buffer(
                struct.pack("=Qi", self.fs_all & ~_FS_MAKE_DEVICES, fd), 12)))

        # the job directory's rule: the server packs the fd of each job into this buffer
        # before it forks (``set_job``), so the child does no Python work for it
        self.job_rule = ctypes.create_string_buffer(12)

    def set_job(self, fd):
        """Point the job rule at ``fd`` (an ``O_PATH`` fd of the next child's job dir)."""
        struct.pack_into("=Qi", self.job_rule, 0, self.fs_all, fd)

    def apply(self):
        """Restrict the calling process (a child) for good. Raises OSError."""
        rs = _syscall(_SYS_CREATE, self.attr, self.attr_size, 0)
        if rs < 0:
            raise OSError(ctypes.get_errno(), "landlock_create_ruleset")
        for _fd, rule in self.rules:
            if _syscall(_SYS_ADD_RULE, rs, 1, rule, 0) != 0:
                raise OSError(ctypes.get_errno(), "landlock_add_rule")
        if _syscall(_SYS_ADD_RULE, rs, 1, self.job_rule, 0) != 0:
            raise OSError(ctypes.get_errno(), "landlock_add_rule job")
        if _syscall(_SYS_RESTRICT, rs, 0) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self")


def _write(path, data):
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


_CAP_HEADER = ctypes.create_string_buffer(struct.pack("=Ii", 0x20080522, 0), 8)
_CAP_DATA = ctypes.create_string_buffer(24)  # all zero: no capability at all


def _drop_caps():
    """Clear the effective/permitted/inheritable (hence ambient) capability sets."""
    if _syscall(_SYS_CAPSET, _CAP_HEADER, _CAP_DATA) != 0:
        raise OSError(ctypes.get_errno(), "capset")


class Isolation:
    """How children are isolated: ``kind`` is ``"landlock"`` or ``"namespaces"``.

    Every Python-level step in a child costs copy-on-write page faults, so what can be
    prepared in the server is (rule buffers, capability buffers, environment)."""

    def __init__(self, kind, landlock=None):
        self.kind = kind
        self.landlock = landlock
        uid, gid = os.getuid(), os.getgid()
        self.uid_map = f"{uid} {uid} 1".encode()
        self.gid_map = f"{gid} {gid} 1".encode()

    def prepare(self, jobdir):
        """In the server, before forking the child of ``jobdir``; returns an fd to close
        after the fork (or -1)."""
        if self.kind != "landlock":
            return -1
        fd = os.open(jobdir, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        self.landlock.set_job(fd)
        os.environ["TMPDIR"] = os.environ["HOME"] = jobdir + "/t"
        return fd

    def enter(self, jobdir, tmp_bytes):
        """Isolate the calling child; returns its cwd. Raises OSError.

        ``landlock``: a user namespace of its own without uid map (``RLIMIT_NPROC`` then
        counts only this execution's processes; the program sees uid/gid 65534), then the
        Landlock domain. The child stays non-dumpable (inherited from the server)."""
        if self.kind == "landlock":
            if _libc.unshare(0x10000000) != 0:  # CLONE_NEWUSER
                raise OSError(ctypes.get_errno(), "unshare")
            self.landlock.apply()
            _drop_caps()
            return jobdir + "/w"
        _libc.prctl(4, 1, 0, 0, 0)  # dumpable while we write our own /proc/self maps
        if _libc.unshare(0x10000000 | 0x00020000) != 0:  # CLONE_NEWUSER | CLONE_NEWNS
            raise OSError(ctypes.get_errno(), "unshare")
        _write("/proc/self/setgroups", b"deny")
        _write("/proc/self/uid_map", self.uid_map)
        _write("/proc/self/gid_map", self.gid_map)
        for src, dst, fstype, flags, data in (
                (b"none", b"/", None, (1 << 14) | (1 << 18), None),  # MS_REC | MS_PRIVATE
                ((jobdir + "/w").encode(), b"/workspace", None, 4096, None),  # MS_BIND
                (b"tmpfs", b"/tmp", b"tmpfs", 2 | 4, f"size={tmp_bytes},mode=1777".encode())):
            if _libc.mount(src, dst, fstype, flags, data) != 0:
                raise OSError(ctypes.get_errno(), f"mount {dst.decode()}")
        _drop_caps()
        _libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 0
        return "/workspace"


def choose_isolation(preferred):
    """The first isolation (``landlock``, then ``namespaces``) that a test child can enter."""
    abi = _syscall(_SYS_CREATE, None, 0, 1)
    errors = {}
    for kind in [preferred] if preferred else ["landlock", "namespaces"]:
        if kind == "landlock" and abi < 1:
            errors[kind] = f"no Landlock in this kernel (errno {ctypes.get_errno()})"
            continue
        iso = Isolation(kind, Landlock(abi) if kind == "landlock" else None)
        jobdir = os.path.join(ROOT, "probe")
        os.makedirs(jobdir + "/w", exist_ok=True)
        os.makedirs(jobdir + "/t", exist_ok=True)
        r, w = os.pipe()
        jfd = iso.prepare(jobdir)
        pid = os.fork()
        if pid == 0:
            try:
                os.close(r)
                iso.enter(jobdir, 1 << 20)
                try:  # the walls hold: nothing beside the job directory is writable
                    os.close(os.open(ROOT + "/x", os.O_CREAT | os.O_WRONLY, 0o600))
                    os.write(w, b"wall missing")
                except OSError:
                    pass
            except BaseException as e:
                os.write(w, repr(e).encode())
            finally:
                os._exit(0)
        os.close(w)
        if jfd >= 0:
            os.close(jfd)
        with os.fdopen(r, "rb") as f:
            msg = f.read().decode("utf-8", "replace")
        os.waitpid(pid, 0)
        shutil.rmtree(jobdir, ignore_errors=True)
        if not msg:
            return iso, errors
        errors[kind] = msg
    return None, errors
