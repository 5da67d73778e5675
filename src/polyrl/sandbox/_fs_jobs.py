"""The fork-server's record of one execution and its process helpers (stdlib only; runs
INSIDE the sandbox).

Not imported: sent with the other ``_fs_*.py`` files as one program, before
``_fs_server.py``, whose ``main`` uses these names. ``Job`` holds one execution's
child, pipes, buffers and deadlines; ``stray_sweep`` kills what no running execution
owns; ``_children_cpu`` is the CPU time of the children reaped so far (a warm
execution's whole tree); ``_remove`` deletes a finished job directory.
"""

import os
import resource
import shutil
import signal
import socket
import time


class Job:
    """One execution: its child, pipes, buffers, deadlines."""

    __slots__ = ("req", "id", "t0", "deadline", "kill_at", "killed_for", "exited",
                 "status", "ru", "out", "err", "out_fd", "err_fd", "trunc_out", "trunc_err",
                 "open", "pid", "pidfd", "dir", "limit", "setup_fd", "root_fd", "cpu0", "end",
                 "released")

    def __init__(self, req, jobdir):
        self.req = req
        self.id = req["id"]
        self.t0 = time.monotonic()
        self.deadline = self.t0 + req["timeout_s"]
        self.kill_at = None
        self.killed_for = None
        self.exited = False
        self.status = 0
        self.ru = None
        self.out = bytearray()
        self.err = bytearray()
        self.trunc_out = self.trunc_err = False
        self.open = 2
        self.pid = -1
        self.pidfd = -1
        self.dir = jobdir
        self.limit = req["max_output_bytes"]
        self.setup_fd = -1
        self.root_fd = -1  # O_PATH fd of its workspace, to collect from
        self.cpu0 = None  # exec mode: our children's CPU seconds before its fork
        self.end = None  # monotonic time its main process was reaped
        self.released = False  # its program may run: its wall clock runs (``release``)

    def release(self, gate):
        """Let the program run; its wall time and deadline count from now. ``gate``: a
        forked child waits at its gate, once isolated, for the ``G`` byte on its setup
        socket (exec mode has none)."""
        self.released = True
        self.t0 = time.monotonic()
        self.deadline = self.t0 + self.req["timeout_s"]
        if gate and self.setup_fd >= 0:
            sock = socket.socket(fileno=self.setup_fd)
            try:  # (SIGPIPE is fatal here: the default that children inherit)
                sock.send(b"G", socket.MSG_NOSIGNAL)
            except OSError:  # the child is gone: its exit is reported all the same
                pass
            finally:
                sock.detach()


def stray_sweep(active_sids):
    """Kill every process of this sandbox that belongs to no running execution.

    Only as pid 1 of its own pid namespace (bwrap --as-pid-1): run anywhere else (by
    hand, for profiling) the sweep would kill the host's processes."""
    me = os.getpid()
    if me != 1:
        return
    my_sid = os.getsid(0)
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                data = f.read()
            sid = int(data[data.rindex(b")") + 2:].split()[3])
        except (OSError, ValueError, IndexError):
            continue
        if sid not in active_sids and sid != my_sid:
            try:
                os.kill(int(name), signal.SIGKILL)
            except OSError:
                pass


def _children_cpu():
    """User + system CPU seconds of every child this process has reaped so far."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _children_file():
    path = f"/proc/self/task/{os.getpid()}/children"
    return path if os.path.exists(path) else None


def _remove_if_empty(jobdir):
    """Remove ``jobdir`` when the program left nothing in it (the usual case, cheap
    enough for the server's loop); False when it did."""
    try:
        os.rmdir(jobdir + "/w")
        os.rmdir(jobdir + "/t")
        os.rmdir(jobdir)
    except OSError:
        return False
    return True


def _cleaner(todo, done_w):
    """The server's cleaner thread: run each ``(func, path)`` of ``todo`` (a job
    directory or ``/dev/shm`` to empty), one byte on ``done_w`` after each. A program may
    leave millions of files there (bwrap's tmpfs has no inode cap): removing them in the
    server's loop stopped it for seconds, and every running execution's deadline, output
    and reply with it (an execution that had ended in time read as timed out)."""
    while True:
        func, path = todo.get()
        try:
            func(path)
        except BaseException:  # what is left stays; the server must go on
            pass
        os.write(done_w, b"x")


def _remove(jobdir):
    try:  # the usual case: the program left nothing behind
        os.rmdir(jobdir + "/w")
        os.rmdir(jobdir + "/t")
        os.rmdir(jobdir)
    except OSError:
        try:  # directories the program made read-only too: the space must come back
            _empty(jobdir)  # noqa: F821 (from _fs_exec_isolation.py)
            os.rmdir(jobdir)
        except OSError:
            shutil.rmtree(jobdir, ignore_errors=True)
