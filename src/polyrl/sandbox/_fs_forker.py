"""The fork-server's forker: the process that forks every execution (stdlib only; runs
INSIDE the sandbox).

Not imported: ``forkserver.py`` sends this file's text with ``_fs_isolation.py``,
``_fs_exec_isolation.py``, ``_fs_child.py`` and ``_fs_server.py`` as one program, so
``child_main`` and ``_isolation_failed`` are defined.

Why a process of its own: a child inherits the memory of the process it is forked
from. Forked from the server, it held every request the server had read: the code,
stdin and input files of the executions running beside it, readable by a program
through ``sys._getframe()`` or ``gc.get_objects()`` (measured: one execution printed
another's stdin). The forker is forked from the server once, before the server reads
any request, and never receives request data: per execution it gets file descriptors
only (what the child needs of the request, ``child_plan``: no stdin, marshalled in a
memfd that only the child reads;
stdin, the output pipes and the setup socket), forks, and reports the child's pid, then
its exit status and resource usage. So a child's memory holds its own request, and nothing of
any other.

Messages on the SOCK_SEQPACKET socket. Server -> forker: ``>i`` token + fds
``[request memfd, stdin, stdout w, stderr w, setup w]`` (+ the job directory's
``O_PATH`` fd under ``landlock``). Forker -> server: ``b"P" + =ii (pid, token)`` when
forked, ``b"E" + =i token + message`` when the fork failed, ``b"X" + =iiddqd (pid,
status, utime s, stime s, maxrss KiB, monotonic time of the reap)`` when a child was
reaped (the time: the server may be busy when it reads the report, and an execution
that ended before its deadline must never read as timed out). With a pid namespace
per execution, pids as this sandbox's ``/proc`` numbers them (the forker's own differ).
"""

# ruff: noqa: F821

import base64
import ctypes
import marshal
import os
import select
import signal
import socket
import struct
import time

_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_SYS_CLOSE_RANGE = 436

_ASK = struct.Struct("=i")
_PID = struct.Struct("=ii")
_EXIT = struct.Struct("=iiddqd")


def forker_main(sock, iso):
    """Serve the server's fork requests on ``sock`` until it closes; never returns.

    The forker reaps its own children (executions) and reports them; before it reaps
    one it kills that execution's process group (the pid cannot be reused then; after
    the reap the server must not signal it by pid). Their orphans go to the server (pid
    1, the subreaper), which kills them as strays.

    With a pid namespace per execution (``iso.pidns``) the forker is pid 1 of a user
    and pid namespace of its own (``own_user_and_pid_namespace``: its parent waits for
    it and exits as it did), so that it may make one below for each execution and
    return to its own after each fork: ``unshare(CLONE_NEWPID)``, the new namespace's
    init (pid 1, ``spawn_pidns_init``), the execution's child (pid 2, its own child:
    ``wait4`` gives its status and usage as before), ``setns`` back. Pids go to the
    server as its ``/proc`` numbers them (``outer_pid``). Once the child is reaped its
    init is killed, and with it whatever the execution left in its namespace."""
    if iso.pidns:
        own_user_and_pid_namespace(iso)
        iso.pidns_fd = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
        drop_dac_capabilities()
        _syscall(_SYS_CLOSE_RANGE, 3, 0xFFFFFFFF, 4)  # CLOSE_RANGE_CLOEXEC: inits hold none
    poller = select.poll()
    sfd = sock.fileno()
    poller.register(sfd, select.POLLIN)
    pidfds = {}
    shown = {}  # pid here -> (pid in the server's numbering, its namespace's init)
    while True:
        for fd, _ev in poller.poll():
            if fd != sfd:
                pid = pidfds.pop(fd)
                poller.unregister(fd)
                os.close(fd)
                try:  # its processes left in its group, while its zombie holds the pid
                    os.killpg(pid, signal.SIGKILL)  # (once reaped, the pid may be reused)
                except OSError:
                    pass
                _, status, ru = os.wait4(pid, 0)
                end = time.monotonic()
                outer, init = shown.pop(pid, (pid, -1))
                if init > 0:  # from outside its namespace: always delivered
                    os.kill(init, signal.SIGKILL)
                    os.waitpid(init, 0)  # the kernel has killed and reaped the namespace
                sock.send(b"X" + _EXIT.pack(outer, status, ru.ru_utime, ru.ru_stime,
                                            ru.ru_maxrss, end))
                continue
            msg, fds, _flags, _addr = socket.recv_fds(sock, 64, 8)
            if not msg:
                os._exit(0)  # the server is gone
            init = pid = -1
            try:
                if iso.pidns:
                    init = 0  # from here on, the setns below is due
                    init = _new_pid_namespace(iso, fds)
                pid = os.fork()
            except OSError as e:
                for f in fds:
                    os.close(f)
                if init > 0:
                    os.kill(init, signal.SIGKILL)
                    os.waitpid(init, 0)
                sock.send(b"E" + msg[:4] + f"fork: {e}".encode()[:1000])
            if pid == 0:
                sock.close()
                forked_child(iso, fds)
            if init >= 0 and _libc.setns(iso.pidns_fd, 0x20000000) != 0:  # CLONE_NEWPID
                os._exit(1)  # cannot go back to its own pid namespace: fail loudly
            if pid < 0:
                continue
            for f in fds:
                os.close(f)
            pfd = os.pidfd_open(pid)
            pidfds[pfd] = pid
            poller.register(pfd, select.POLLIN)
            if init > 0:
                shown[pid] = (outer_pid(pfd), init)
                pid = shown[pid][0]
            sock.send(b"P" + _PID.pack(pid, _ASK.unpack(msg[:4])[0]))


def _new_pid_namespace(iso, fds):
    """``unshare(CLONE_NEWPID)`` and start the new namespace's init; returns its pid.
    Raises OSError (the caller then ``setns``-es back all the same)."""
    if _libc.unshare(0x20000000) != 0:  # CLONE_NEWPID
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWPID)")
    return spawn_pidns_init(iso.init_path, fds)


def forked_child(iso, fds):
    """In a new child of the forker: read its own plan (``child_plan``) from the memfd,
    then run it (``child_main``). Never returns."""
    setup_w = fds[4] if len(fds) > 4 else -1
    try:
        rq = fds[0]
        plan = marshal.loads(os.pread(rq, os.lseek(rq, 0, os.SEEK_END), 0))
        os.close(rq)
        if plan[6] is not None:  # landlock: the rule and $TMPDIR of its job directory
            iso.landlock.set_job(fds[5])
            os.environ["TMPDIR"] = os.environ["HOME"] = plan[6] + "/t"
    except BaseException as e:  # a bug of ours, never a verdict on the program
        if setup_w >= 0:
            _isolation_failed(setup_w, f"{type(e).__name__}: {e}")
        os._exit(121)
    try:
        child_main(plan, iso, fds[1], fds[2], fds[3], setup_w)
    except BaseException as e:
        _isolation_failed(setup_w, f"{type(e).__name__}: {e}")
    finally:
        os._exit(121)


def child_plan(req, iso):
    """In the server: what the child of ``req`` needs, ready to use (``child_main``):
    ``(program, source, rlimits, files, send_root, mounts, jobdir)``; ``files`` decoded
    to ``(rel, bytes)`` pairs, ``mounts`` the tmpfs options (``Isolation.mount_options``).
    Worked out here, not in the child, where each page its Python work writes is a
    copy-on-write fault (measured: ~12 fewer per execution than a dict request decoded
    and formatted in the child, ~4% less CPU per child). Raises ValueError (base64)."""
    files = [(rel, base64.b64decode(b64)) for rel, b64 in (req.get("files") or {}).items()]
    jobdir = req.get("jobdir")
    return (req.get("program"), req.get("code"), req["rlimits"], files,
            jobdir is None and bool(req.get("collect")),
            iso.mount_options(req["tmp_bytes"], files), jobdir)


class ForkerUsage:
    """``resource.struct_rusage``'s fields the server reads, from a forker report."""

    __slots__ = ("ru_utime", "ru_stime", "ru_maxrss")

    def __init__(self, utime, stime, maxrss):
        self.ru_utime, self.ru_stime, self.ru_maxrss = utime, stime, maxrss


def start_forker(iso, close_in_child):
    """Fork the forker (before the server reads any request); returns ``(pid, socket)``.
    ``close_in_child``: the server's fds the forker must not hold (its control pipes)."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = os.fork()
    if pid == 0:
        try:
            ours.close()
            for fd in close_in_child:
                os.close(fd)
            forker_main(theirs, iso)
        finally:
            os._exit(1)
    theirs.close()
    return pid, ours


def ask_forker(sock, token, plan, fds):
    """Send one fork request: ``plan`` (``child_plan``) in a new memfd, and ``fds`` =
    ``[stdin, stdout w, stderr w, setup w (, jobdir)]``. Raises OSError."""
    rq = os.memfd_create("request", os.MFD_CLOEXEC)
    try:
        # marshal, not JSON: the child's json.loads cost ~60 more page faults (the data
        # is the server's own: only str, bytes, int, bool, None, list and tuple)
        view = memoryview(marshal.dumps(plan))
        while view:
            view = view[os.write(rq, view):]
        socket.send_fds(sock, [_ASK.pack(token)], [rq, *fds])
    finally:
        os.close(rq)


def read_forker(sock):
    """The forker's pending reports: ``[(kind, fields)]``, kind ``"P"``: ``(pid, token)``,
    ``"E"``: ``(token, message)``, ``"X"``: ``(pid, status, ForkerUsage, end)``; None once the
    forker is gone (its socket closed)."""
    out = []
    while True:
        try:
            msg = sock.recv(4096, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return out
        if not msg:
            return None
        kind = msg[:1]
        if kind == b"P":
            out.append(("P", _PID.unpack(msg[1:1 + _PID.size])))
        elif kind == b"E":
            out.append(("E", (_ASK.unpack(msg[1:5])[0], msg[5:].decode("utf-8", "replace"))))
        elif kind == b"X":
            pid, status, ut, st, mx, end = _EXIT.unpack(msg[1:1 + _EXIT.size])
            out.append(("X", (pid, status, ForkerUsage(ut, st, mx), end)))
