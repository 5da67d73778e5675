"""Isolation of one fork-server execution (stdlib only; runs INSIDE the sandbox).

Not imported: ``forkserver.py`` sends this file's text followed by those of
``_fs_exec_isolation.py``, ``_fs_child.py`` and ``_fs_server.py`` as one program
(``python -c``), so the server finds these names defined. ``Isolation`` is that of
fork-server children (``namespaces``, or the ``landlock`` fallback); ``ExecIsolation``
(``_fs_exec_isolation.py``) that of warm-sandbox executions. See ``_fs_server.py``.
"""

import ctypes
import os
import re
import shutil
import struct

ROOT = "/tmp/fs"
_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall

# Landlock (include/uapi/linux/landlock.h; x86_64 and aarch64 share these numbers)
_SYS_CREATE, _SYS_ADD_RULE, _SYS_RESTRICT = 444, 445, 446
# capset's number (the Landlock calls have one number everywhere); None: unknown here
_SYS_CAPSET = {"x86_64": 126, "aarch64": 91, "riscv64": 91}.get(os.uname().machine)
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

    def __init__(self, abi, scope=True):
        self.abi = abi
        self.fs_all = _FS_RIGHTS_BY_ABI.get(abi, _FS_RIGHTS_BY_ABI[5])
        scoped = (_SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL) if abi >= 6 and scope else 0
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


_SECCOMP = []  # [buffer, sock_fprog] once set_seccomp ran (the server, at start)


def set_seccomp(data):
    """Keep the filter (``struct sock_filter[]`` bytes from ``polyrl.sandbox.seccomp``)
    for ``apply_seccomp``; None: no filter."""
    if not data:
        return

    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    buf = ctypes.create_string_buffer(data, len(data))
    _SECCOMP[:] = [buf, Fprog(len(data) // 8, ctypes.addressof(buf))]


def apply_seccomp():
    """In a child, after its own namespaces exist: load the filter (no_new_privs is set
    by bwrap). Raises OSError."""
    if _SECCOMP and _libc.prctl(22, 2, ctypes.byref(_SECCOMP[1]), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "seccomp")  # PR_SET_SECCOMP, MODE_FILTER


_CLONE_NEWNET = 0x40000000
_SIOCSIFFLAGS, _IFF_UP = 0x8914, 1
_LO_UP = ctypes.create_string_buffer(struct.pack("16sH22x", b"lo", _IFF_UP), 40)  # ifreq


def _loopback_up():
    """Bring up ``lo`` of the calling process's new network namespace (that adds
    127.0.0.1 and ::1); needs CAP_NET_ADMIN there, i.e. before ``_drop_caps``. OSError."""
    fd = _libc.socket(2, 2 | 0o2000000, 0)  # AF_INET, SOCK_DGRAM | SOCK_CLOEXEC
    if fd < 0:
        raise OSError(ctypes.get_errno(), "socket")
    try:
        if _libc.ioctl(fd, _SIOCSIFFLAGS, _LO_UP) != 0:
            raise OSError(ctypes.get_errno(), "SIOCSIFFLAGS lo up")
    finally:
        os.close(fd)


def _write(path, data, dir_fd=None):
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


# inotify instances and watches are counted per uid at every user namespace level up
# to the host's, where every sandbox's count is its creator's (root, or the user): one
# program took all 128 of the host's, and the host's own inotify_init then failed
INOTIFY_INSTANCES = 8
INOTIFY_WATCHES = 8192
_INOTIFY_CAPS = ((b"max_inotify_instances", str(INOTIFY_INSTANCES).encode()),
                 (b"max_inotify_watches", str(INOTIFY_WATCHES).encode()))


def limit_inotify(sys_fd=-1):
    """In a new user namespace, with its capabilities: cap the inotify instances and
    watches of each uid in it (``user.max_inotify_*``, per user namespace) at
    ``INOTIFY_INSTANCES`` and ``INOTIFY_WATCHES``, through ``sys_fd`` (a writable
    ``/proc/sys`` directory) if given. Best effort: a ``/proc/sys`` it cannot write leaves
    the host's limits, as before (never an execution refused for it)."""
    for name, value in _INOTIFY_CAPS:
        try:
            if sys_fd >= 0:
                _write(b"user/" + name, value, sys_fd)
            else:
                _write(b"/proc/sys/user/" + name, value)
        except OSError:
            pass


_CAP_HEADER = ctypes.create_string_buffer(struct.pack("=Ii", 0x20080522, 0), 8)
_CAP_DATA = ctypes.create_string_buffer(24)  # all zero: no capability at all


def _drop_caps():
    """Clear the effective/permitted/inheritable (hence ambient) capability sets."""
    if _SYS_CAPSET is None:  # fail closed: never run with capabilities left
        raise OSError(0, f"capset: no system call number for {os.uname().machine}")
    if _syscall(_SYS_CAPSET, _CAP_HEADER, _CAP_DATA) != 0:
        raise OSError(ctypes.get_errno(), "capset")


class Isolation:
    """How children are isolated: ``kind`` is ``"namespaces"`` or ``"landlock"``.

    ``namespaces`` (the default): its own user, mount and IPC namespace with fresh
    tmpfs at ``/workspace``, ``/tmp`` and ``/dev/shm``, so the other executions' files,
    sockets and shared memory are not even visible, and no execution can fill another's
    space (each tmpfs has its own size); where
    Landlock has ABI >= 6, a domain that scopes signals and abstract unix sockets to the
    execution (one ruleset without rules, built once). ``landlock`` (where mount
    namespaces fail): its own user namespace and a Landlock domain over the shared
    filesystem (write only beneath its job directory).

    ``private_network``: each child also gets a network namespace of its own with only
    a loopback interface, so concurrent executions never share ports (~30% fewer
    executions/s of a trivial program here, ~15% on HumanEval checks: creating and destroying a network namespace
    is one of the kernel's costlier operations).

    ``pid_namespace``: each child also runs in a pid namespace of its own, made by the
    forker (``forker_main``), as pid 2 beside an init: it can neither see
    (``namespaces``: a fresh ``/proc``) nor signal the other executions, the forker or
    the server. None: only where Landlock cannot scope signals (ABI < 6, or ``scope``
    False, a test's switch), since it costs a namespace, an init and a ``/proc`` per
    execution.

    Every Python-level step in a child costs copy-on-write page faults, so what can be
    prepared in the server is (rule buffers, capability buffers, environment)."""

    def __init__(self, kind, landlock=None, abi=0, private_network=False,
                 pid_namespace=None, scope=True):
        self.kind = kind
        self.landlock = landlock
        self.abi = abi
        self.net = _CLONE_NEWNET if private_network else 0
        self.scope = -1
        # read-only binds under /tmp (the Python installation of a checkout there): the
        # child's fresh /tmp would hide them, so it binds them again
        self.tmp_mounts = _mounts_beneath(("/tmp",)) if kind == "namespaces" else []
        if kind == "namespaces" and abi >= 6 and scope:
            self.scope = _scoped_ruleset(0, [])  # no file rules: scopes only
        scoped = abi >= 6 and scope
        self.pidns = (not scoped) if pid_namespace is None else bool(pid_namespace)
        self.pidns_fd = -1  # the forker's own pid namespace, once it has made it
        self.init_path = _init_program() if self.pidns else None
        # ctypes looks a function up (Python code, dlsym) on its first use and keeps it:
        # done here once, not by every child (~25 fewer page faults each)
        for name in ("unshare", "mount", "prctl", "setns", "socket", "ioctl"):
            getattr(_libc, name, None)  # missing: fails where used, as before
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

    def mount_options(self, tmp_bytes, files):
        """In the server: the tmpfs options (bytes) of a child's ``(/workspace, /tmp and
        /dev/shm)`` under ``namespaces`` (None under ``landlock``): ``/workspace`` holds
        the input ``files`` (``(rel, data)`` pairs) with the room of a ``/tmp``
        (``workspace_limits``), ``/tmp`` and ``/dev/shm`` have ``tmp_bytes`` each, with
        at most one inode per page of their size (``_inodes``)."""
        if self.kind != "namespaces":
            return None
        ws_bytes, ws_inodes = workspace_limits(tmp_bytes, files)
        return (f"size={ws_bytes},nr_inodes={ws_inodes},mode=700".encode(),
                f"size={tmp_bytes},nr_inodes={_inodes(tmp_bytes)},mode=1777".encode())

    def enter(self, jobdir, mounts):
        """Isolate the calling child; returns its cwd. Raises OSError.

        ``namespaces``: ``jobdir`` is unused; ``mounts`` (``mount_options``) are the
        options of its tmpfs at ``/workspace``, and at ``/tmp`` and ``/dev/shm``.

        ``landlock``: a user namespace of its own without uid map (``RLIMIT_NPROC`` then
        counts only this execution's processes; the program sees uid/gid 65534), then the
        Landlock domain. The child stays non-dumpable (inherited from the server).

        ``pidns`` (the child is pid 2 of a pid namespace of its own, owned by the forker's
        user namespace, where it still has every capability): ``namespaces`` makes its
        mount namespace and mounts (with a fresh ``/proc`` of its pid namespace) first,
        there, then its user namespace; ``landlock`` is as without (no mount namespace:
        ``/proc`` lists the others, none of which it can signal)."""
        if self.kind == "landlock":
            if _libc.unshare(0x10000000 | self.net) != 0:  # CLONE_NEWUSER
                raise OSError(ctypes.get_errno(), "unshare")
            limit_inotify()
            if self.net:
                _loopback_up()
            self.landlock.apply()
            _drop_caps()
            return jobdir + "/w"
        _libc.prctl(4, 1, 0, 0, 0)  # dumpable while we write our own /proc/self maps
        if self.pidns:  # mounts first: /proc needs capabilities where the pid ns belongs
            if _libc.unshare(0x00020000) != 0:  # CLONE_NEWNS
                raise OSError(ctypes.get_errno(), "unshare")
        # CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWIPC
        elif _libc.unshare(0x10000000 | 0x00020000 | 0x08000000 | self.net) != 0:
            raise OSError(ctypes.get_errno(), "unshare")
        else:
            map_ids(self.uid_map, self.gid_map)
            limit_inotify()
            if self.net:
                _loopback_up()
        own_tmpfs(((b"/workspace", mounts[0]), (b"/tmp", mounts[1]), (b"/dev/shm", mounts[1])),
                  self.tmp_mounts)
        # a devpts instance of its own: the server's /dev/pts lists every execution's
        # ptys, which another execution (same uid) could open, read and write
        if _libc.mount(b"devpts", b"/dev/pts", b"devpts", 2 | 8,
                       b"newinstance,ptmxmode=0666,mode=0620") != 0:  # NOSUID | NOEXEC
            raise OSError(ctypes.get_errno(), "mount /dev/pts")
        if self.pidns:
            if _libc.mount(b"proc", b"/proc", b"proc", 2 | 4 | 8, None) != 0:  # NOSUID|NODEV|NOEXEC
                raise OSError(ctypes.get_errno(), "mount /proc")
        # pidns: its inotify caps are written below through the writable /proc/sys
        rw_sys = os.open("/proc/sys", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC) if self.pidns else -1
        _read_only_proc_sys()  # (on failure the child exits: nothing to close)
        # pidns: its id maps are written below through the writable /proc underneath
        rw_proc = os.open("/proc", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC) if self.pidns else -1
        try:
            _read_only_proc()
            if self.pidns:
                # CLONE_NEWUSER | CLONE_NEWIPC: its own RLIMIT_NPROC count, as without
                if _libc.unshare(0x10000000 | 0x08000000 | self.net) != 0:
                    raise OSError(ctypes.get_errno(), "unshare")
                map_ids(self.uid_map, self.gid_map, rw_proc)
                limit_inotify(rw_sys)
        finally:
            for fd in (rw_proc, rw_sys):
                if fd >= 0:
                    os.close(fd)
        if self.pidns:
            if self.net:
                _loopback_up()
        _drop_caps()  # and seccomp (after this) refuses mount calls: the mounts stay
        if self.scope >= 0 and _syscall(_SYS_RESTRICT, self.scope, 0) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self (scopes)")
        _libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 0
        return "/workspace"


_INIT_CODE = {"x86_64": bytes.fromhex("b822000000" "0f05" "ebf7")}  # 1: pause(); jmp 1b


def _init_program():
    """Path of the program that a pid namespace's init runs: a tiny static one (pause
    in a loop; x86_64) in a memfd of mode 0111, which makes its process non-dumpable
    (it cannot be traced, nor its /proc files read, by the execution: same uid) and
    costs ~0.1 ms to start; else a ``sleep`` binary (traceable), else None (a fork of
    the server). Tried once here: an exec refused (``vm.memfd_noexec``) falls back."""
    code = _INIT_CODE.get(os.uname().machine)
    if code is not None:
        base, head = 0x400000, 64 + 56
        size = head + len(code)
        elf = (b"\x7fELF\x02\x01\x01" + bytes(9) + struct.pack(  # ELF64, little-endian
            "<HHIQQQIHHHHHH", 2, 0x3E, 1, base + head, 64, 0, 0, 64, 56, 1, 0, 0, 0)
            + struct.pack("<IIQQQQQQ", 1, 5, 0, base, base, size, size, 0x1000) + code)
        try:
            fd = os.memfd_create("polyrl-init", os.MFD_CLOEXEC)
            os.write(fd, elf)
            os.fchmod(fd, 0o111)
            path = f"/proc/self/fd/{fd}"
            pid = os.posix_spawn(path, ["init"], {})
            alive = os.waitpid(pid, os.WNOHANG)[0] == 0
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            if alive:
                return path
            os.close(fd)
        except OSError:
            pass
    return next((p for p in ("/usr/bin/sleep", "/bin/sleep") if os.access(p, os.X_OK)), None)


def _read_only_proc_sys():
    """In the child's own mount namespace (with CAP_SYS_ADMIN there): bind ``/proc/sys``
    over itself read-only. Since Linux 6.14 ``kernel/pid_max`` is per pid namespace and
    writable by the uid that owns it, the sandbox's: without this, one execution set it
    to 301 for the server's pid namespace and every later execution's fork failed
    (EAGAIN) for the server's lifetime. Raises OSError."""
    if _libc.mount(b"/proc/sys", b"/proc/sys", None, 4096 | (1 << 14), None) != 0:
        raise OSError(ctypes.get_errno(), "bind /proc/sys")  # MS_BIND | MS_REC
    # MS_REMOUNT | MS_BIND | MS_RDONLY, keeping the proc mount's locked NOSUID|NODEV|NOEXEC
    if _libc.mount(None, b"/proc/sys", None, 32 | 4096 | 1 | 2 | 4 | 8, None) != 0:
        raise OSError(ctypes.get_errno(), "remount /proc/sys read-only")


def _read_only_proc():
    """In the child's own mount namespace: bind ``/proc`` (with ``/proc/sys`` beneath,
    read-only already) over itself read-only. Writing its ``/proc/self`` files needs the
    process to be dumpable, which a program may make itself again (``prctl``, or any
    exec): a program wrote ``/proc/self/oom_score_adj`` back to 0 from the 1000 every
    sandboxed process has (raised by a process without ``CAP_SYS_RESOURCE``, a non-root
    host's, the kernel lets it lower it again). A pipe or file reached through
    ``/proc/self/fd`` is written through its own mount. Raises OSError."""
    if _libc.mount(b"/proc", b"/proc", None, 4096 | (1 << 14), None) != 0:
        raise OSError(ctypes.get_errno(), "bind /proc")  # MS_BIND | MS_REC
    if _libc.mount(None, b"/proc", None, 32 | 4096 | 1 | 2 | 4 | 8, None) != 0:
        raise OSError(ctypes.get_errno(), "remount /proc read-only")


def map_ids(uid_map, gid_map, proc_fd=-1):
    """In a new user namespace: deny setgroups, write the uid and gid maps (bytes, e.g.
    ``b"1000 1000 1"``), through ``proc_fd`` (a ``/proc`` directory) if given. Raises
    OSError."""
    if proc_fd >= 0:
        base, dir_fd = "self", proc_fd
    else:
        base, dir_fd = "/proc/self", None
    _write(base + "/setgroups", b"deny", dir_fd)
    _write(base + "/uid_map", uid_map, dir_fd)
    _write(base + "/gid_map", gid_map, dir_fd)


def own_tmpfs(mounts, rebind):
    """In a new mount namespace (with CAP_SYS_ADMIN in its user namespace): make every
    mount private, mount a tmpfs at each ``(dst, options)`` of ``mounts`` (bytes; nosuid,
    nodev), then bind again the read-only mount points ``rebind`` they cover (a Python
    installation under ``/tmp``), opened here: a bind whose source belongs to another
    mount namespace fails with EINVAL. Raises OSError."""
    if _libc.mount(b"none", b"/", None, (1 << 14) | (1 << 18), None) != 0:
        raise OSError(ctypes.get_errno(), "mount / private")  # MS_REC | MS_PRIVATE
    keep = [os.open(m, os.O_PATH | os.O_CLOEXEC) for m in rebind]
    try:
        for dst, options in mounts:
            if _libc.mount(b"tmpfs", dst, b"tmpfs", 2 | 4, options) != 0:  # NOSUID|NODEV
                raise OSError(ctypes.get_errno(), f"mount {dst.decode()}")
        for point, fd in zip(rebind, keep, strict=True):
            os.makedirs(point, exist_ok=True)
            if _libc.mount(f"/proc/self/fd/{fd}".encode(), point.encode(), None,
                           4096 | (1 << 14), None) != 0:  # MS_BIND | MS_REC, stays read-only
                raise OSError(ctypes.get_errno(), f"bind {point}")
    finally:
        for fd in keep:
            os.close(fd)


def _inodes(size_bytes):
    """Inodes of a tmpfs of ``size_bytes``: one per 4 KiB page, at least 1024. Uncapped,
    empty files take no size but ~0.8 KiB of kernel memory each, which no limit counts
    (measured: 485,000 in 4 s, +400 MiB of unreclaimable slab)."""
    return max(1024, size_bytes // 4096)


def workspace_limits(tmp_bytes, files):
    """``(bytes, inodes)`` of a ``/workspace`` tmpfs that holds the input ``files``
    (``(rel, data)`` pairs, normalised names) and leaves the program what a ``/tmp`` of
    ``tmp_bytes`` gives it: each file rounded up to pages, one inode per file and
    directory the inputs need."""
    dirs = set()
    for rel, _ in files:
        rel = os.path.dirname(rel)
        while rel and rel not in dirs:
            dirs.add(rel)
            rel = os.path.dirname(rel)
    size = tmp_bytes + sum(-(-len(data) // 4096) * 4096 for _, data in files)
    return size, _inodes(tmp_bytes) + len(files) + len(dirs)


def choose_isolation(preferred, private_network=False, pid_namespace=None, scope=True):
    """The first isolation (``namespaces``, then ``landlock``) that a test child can enter
    (with a network namespace of its own per child if ``private_network``; a pid
    namespace as ``Isolation``'s ``pid_namespace``; ``scope`` False: no Landlock scopes,
    for tests)."""
    abi = _syscall(_SYS_CREATE, None, 0, 1)
    errors = {}
    for kind in [preferred] if preferred else ["namespaces", "landlock"]:
        if kind == "landlock" and abi < 1:
            errors[kind] = f"no Landlock in this kernel (errno {ctypes.get_errno()})"
            continue
        try:
            iso = Isolation(kind, Landlock(abi, scope) if kind == "landlock" else None, abi,
                            private_network, pid_namespace, scope)
        except OSError as e:
            errors[kind] = str(e)
            continue
        jobdir = os.path.join(ROOT, "probe")
        os.makedirs(jobdir + "/w", exist_ok=True)
        os.makedirs(jobdir + "/t", exist_ok=True)
        r, w = os.pipe()
        jfd = iso.prepare(jobdir)
        pid = os.fork()
        if pid == 0:
            try:
                os.close(r)
                if iso.pidns:  # as in the forker (its own user and pid namespace)
                    own_user_and_pid_namespace(iso)  # noqa: F821 (_fs_child.py)
                iso.enter(jobdir, iso.mount_options(1 << 20, ()))
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


def _scoped_ruleset(fs_all, rules, scope=True):
    """A Landlock ruleset handling ``fs_all`` file rights, granting ``rules`` (``(path,
    rights)``; missing paths skipped) and, with ``scope`` (ABI >= 6 only), scoping
    signals and abstract unix sockets; its fd is kept across fork, closed at exec.
    Raises OSError."""
    attr = ctypes.create_string_buffer(struct.pack(  # zeros past a kernel's fields: accepted
        "=QQQ", fs_all, 0, (_SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL) if scope else 0), 24)
    rs = _syscall(_SYS_CREATE, attr, 24, 0)
    if rs < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset")
    for path, rights in rules:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            continue
        rule = ctypes.create_string_buffer(struct.pack("=Qi", rights & fs_all, fd), 12)
        ok = _syscall(_SYS_ADD_RULE, rs, 1, rule, 0) == 0
        err = ctypes.get_errno()
        os.close(fd)
        if not ok:
            raise OSError(err, "landlock_add_rule " + path)
    os.set_inheritable(rs, False)
    return rs


def _mounts_beneath(roots):
    """Mount points strictly beneath any of ``roots`` (from /proc/self/mountinfo)."""
    found = []
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                # mountinfo escapes space, tab, newline and backslash as \ooo
                point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)),
                               line.split()[4])
                if any(point.startswith(r + "/") for r in roots):
                    found.append(point)
    except OSError:
        pass
    return found
