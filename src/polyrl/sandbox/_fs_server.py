"""The fork-server program that runs INSIDE the sandbox (stdlib only; sent as source text).

It imports the ``preload`` modules once, then serves requests from the host: for each,
it forks one child that gets its own session, user + mount namespace (its fresh
workspace directory at /workspace, a fresh /tmp), rlimits, stdin and output pipes, runs the code like ``python -c``, and is reaped; the server pumps
the child's output incrementally, enforces the wall limit, kills strays, and answers.

Wire format (both ways): 4-byte big-endian length + UTF-8 JSON.
Request: ``{"id", "code", "stdin": b64, "files": {rel: b64}, "collect": [rel],
"rlimits": [[res, soft, hard]], "timeout_s", "grace_s", "max_output_bytes",
"tmp_bytes"}``.
Reply: ``{"id", "exit_code", "signal", "stdout": b64, "stderr": b64, "stdout_truncated",
"stderr_truncated", "wall_s", "cpu_s", "peak_memory_mib", "killed_for", "files",
"error"}``.
"""

import base64
import ctypes
import importlib
import json
import os
import resource
import selectors
import shutil
import signal
import struct
import sys
import time
import traceback
import uuid

ROOT = "/tmp/fs"
_libc = ctypes.CDLL(None, use_errno=True)


def send(fd, obj):
    data = json.dumps(obj).encode()
    data = struct.pack(">I", len(data)) + data
    while data:
        n = os.write(fd, data)
        data = data[n:]


ISOLATION_FAILED = 125


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


def isolate(ws, tmp_bytes):
    """Give this execution its own user + mount namespace: its workspace at /workspace,
    a fresh /tmp, and no view of the other executions' directories. Not dumpable, so
    executions running beside it cannot open its /proc/<pid>/{cwd,root,fd,environ,mem}."""
    uid, gid = os.getuid(), os.getgid()
    _libc.prctl(4, 1, 0, 0, 0)  # dumpable while we write our own /proc/self maps
    if _libc.unshare(0x10000000 | 0x00020000) != 0:  # CLONE_NEWUSER | CLONE_NEWNS
        raise OSError(ctypes.get_errno(), "unshare")
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} {uid} 1")
    _write("/proc/self/gid_map", f"{gid} {gid} 1")
    for src, dst, fstype, flags, data in (
            (b"none", b"/", None, (1 << 14) | (1 << 18), None),  # MS_REC | MS_PRIVATE
            (ws.encode(), b"/workspace", None, 4096, None),  # MS_BIND, before /tmp is covered
            (b"tmpfs", b"/tmp", b"tmpfs", 2 | 4, f"size={tmp_bytes},mode=1777".encode())):
        if _libc.mount(src, dst, fstype, flags, data) != 0:
            raise OSError(ctypes.get_errno(), f"mount {dst.decode()}")
    os.chdir("/workspace")
    _libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 0


def child_main(req, ws, stdin_fd, out_w, err_w):
    os.setsid()
    os.dup2(stdin_fd, 0)
    os.dup2(out_w, 1)
    os.dup2(err_w, 2)
    # close the control pipe, other executions' pipes and pidfds (closerange(3, 65536)
    # costs ~6 ms in Python 3.11; listing the open ones costs ~50 us)
    for name in os.listdir("/proc/self/fd"):
        if int(name) > 2:
            try:
                os.close(int(name))
            except OSError:
                pass
    try:
        isolate(ws, req["tmp_bytes"])
    except OSError as e:
        os.write(2, f"polyrl fork-server: cannot isolate the execution: {e}\n".encode())
        os._exit(ISOLATION_FAILED)
    for res, soft, hard in req["rlimits"]:
        resource.setrlimit(res, (soft, hard))
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.argv = ["-c"]
    sys.path.insert(0, "")
    code = 0
    try:
        glb = {"__name__": "__main__", "__builtins__": __builtins__}
        exec(compile(req["code"], "<string>", "exec"), glb)
    except SystemExit as e:
        if e.code is None:
            code = 0
        elif isinstance(e.code, int):
            code = e.code & 0xFF
        else:
            try:
                print(e.code, file=sys.stderr)
            except BaseException:
                pass
            code = 1
    except BaseException:
        try:
            etype, err, tb = sys.exc_info()
            traceback.print_exception(etype, err, tb.tb_next if tb else None)
        except BaseException:
            pass
        code = 1
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except BaseException:
            if code == 0:
                code = 120
    os._exit(code)


class Job:
    def __init__(self, req):
        self.req = req
        self.id = req["id"]
        self.t0 = time.monotonic()
        self.deadline = self.t0 + req["timeout_s"]
        self.kill_at = None
        self.killed_for = None
        self.exited = False
        self.status = 0
        self.ru = None
        self.bufs = {}
        self.trunc = {}
        self.open = 0
        self.pid = -1
        self.pidfd = -1
        self.ws = os.path.join(ROOT, uuid.uuid4().hex)


def stray_sweep(active_sids):
    """Kill every process of this sandbox that belongs to no running execution."""
    me = os.getpid()
    pids = [int(n) for n in os.listdir("/proc") if n.isdigit()]
    if len(pids) <= 1 + len(active_sids):
        return  # only the server and the running executions' main processes
    for pid in pids:
        if pid == me:
            continue
        name = str(pid)
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
            fields = stat[stat.rindex(b")") + 2:].split()
            sid = int(fields[3])
        except (OSError, ValueError, IndexError):
            continue
        if sid not in active_sids and sid != os.getsid(0):
            try:
                os.kill(int(name), signal.SIGKILL)
            except OSError:
                pass


def main():
    preload = json.loads(sys.argv[1]) if len(sys.argv) > 1 else []
    ctl_in = os.dup(0)
    ctl_out = os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    for fd in (ctl_in, ctl_out):
        os.set_inheritable(fd, False)
    _libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans come to us
    _libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 0: executions cannot open our /proc files
    os.makedirs(ROOT, exist_ok=True)
    errors = {}
    for name in preload:
        try:
            importlib.import_module(name)
        except BaseException as e:
            errors[name] = f"{type(e).__name__}: {e}"
    import gc

    gc.collect()
    gc.freeze()  # children's GC skips the server's objects: fewer copy-on-write faults
    with open("/proc/self/status") as f:
        vm_kib = next(int(line.split()[1]) for line in f if line.startswith("VmSize:"))
    send(ctl_out, {"hello": True, "vm_mib": vm_kib / 1024.0, "preload_errors": errors})

    sel = selectors.DefaultSelector()
    os.set_blocking(ctl_in, False)
    sel.register(ctl_in, selectors.EVENT_READ, ("ctl", None))
    inbuf = bytearray()
    jobs = {}
    ctl_open = True

    def start(req):
        job = Job(req)
        try:
            os.mkdir(job.ws, 0o700)
            for rel, b64 in (req.get("files") or {}).items():
                path = os.path.join(job.ws, rel)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "wb") as f:
                    f.write(base64.b64decode(b64))
            data = base64.b64decode(req.get("stdin") or "")
            if data:
                stdin_path = job.ws + ".stdin"
                with open(stdin_path, "wb") as f:
                    f.write(data)
                stdin_fd = os.open(stdin_path, os.O_RDONLY)
                os.unlink(stdin_path)
            else:
                stdin_fd = os.open(os.devnull, os.O_RDONLY)
            out_r, out_w = os.pipe()
            err_r, err_w = os.pipe()
        except OSError as e:
            shutil.rmtree(job.ws, ignore_errors=True)
            send(ctl_out, {"id": job.id, "error": f"setup failed: {e}"})
            return
        try:
            pid = os.fork()
        except OSError as e:
            for fd in (stdin_fd, out_r, out_w, err_r, err_w):
                os.close(fd)
            shutil.rmtree(job.ws, ignore_errors=True)
            send(ctl_out, {"id": job.id, "error": f"fork failed: {e}"})
            return
        if pid == 0:
            try:
                child_main(req, job.ws, stdin_fd, out_w, err_w)
            finally:
                os._exit(121)
        for fd in (stdin_fd, out_w, err_w):
            os.close(fd)
        job.pid = pid
        job.pidfd = os.pidfd_open(pid)
        for fd in (out_r, err_r):
            os.set_blocking(fd, False)
            job.bufs[fd] = bytearray()
            job.trunc[fd] = False
            sel.register(fd, selectors.EVENT_READ, ("out", job))
        job.out_fd, job.err_fd = out_r, err_r
        job.open = 2
        sel.register(job.pidfd, selectors.EVENT_READ, ("exit", job))
        jobs[job.id] = job

    def kill(job, sig):
        try:
            os.killpg(job.pid, sig)
        except OSError:
            pass
        try:
            os.kill(job.pid, sig)
        except OSError:
            pass

    def finish(job):
        del jobs[job.id]
        out = {"id": job.id, "killed_for": job.killed_for,
               "stdout": base64.b64encode(bytes(job.bufs[job.out_fd])).decode(),
               "stderr": base64.b64encode(bytes(job.bufs[job.err_fd])).decode(),
               "stdout_truncated": job.trunc[job.out_fd],
               "stderr_truncated": job.trunc[job.err_fd],
               "wall_s": time.monotonic() - job.t0,
               "cpu_s": job.ru.ru_utime + job.ru.ru_stime,
               "peak_memory_mib": job.ru.ru_maxrss / 1024.0}
        rc = os.waitstatus_to_exitcode(job.status)
        out["exit_code"] = rc if rc >= 0 else None
        out["signal"] = -rc if rc < 0 else None
        files = {}
        for rel in job.req.get("collect") or []:
            path = os.path.join(job.ws, rel)
            try:
                if os.path.realpath(path) != os.path.normpath(path):
                    continue  # goes through a symlink: never follow the program's links
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
                with os.fdopen(fd, "rb") as f:
                    files[rel] = base64.b64encode(f.read(64 << 20)).decode()
            except OSError:
                pass
        out["files"] = files
        stray_sweep({j.pid for j in jobs.values()})
        shutil.rmtree(job.ws, ignore_errors=True)
        send(ctl_out, out)

    while ctl_open or jobs:
        now = time.monotonic()
        timeout = 1.0
        for job in list(jobs.values()):
            if job.killed_for is None and not job.exited and now >= job.deadline:
                job.killed_for = "timeout_s"
                kill(job, signal.SIGTERM)
                job.kill_at = now + job.req["grace_s"]
            if job.kill_at is not None and now >= job.kill_at:
                kill(job, signal.SIGKILL)
                if job.exited:  # a daemon (own session) still holds the output pipes
                    stray_sweep({j.pid for j in jobs.values() if not j.exited})
                job.kill_at = now + 0.2
            for t in (job.deadline if job.killed_for is None else None, job.kill_at):
                if t is not None:
                    timeout = min(timeout, max(0.0, t - now))
        for key, _ in sel.select(timeout + 0.001):
            kind, job = key.data
            if kind == "ctl":
                try:
                    chunk = os.read(ctl_in, 1 << 20)
                except BlockingIOError:
                    continue
                if not chunk:
                    sel.unregister(ctl_in)
                    ctl_open = False
                    for j in jobs.values():
                        kill(j, signal.SIGKILL)
                    continue
                inbuf += chunk
                while len(inbuf) >= 4:
                    (n,) = struct.unpack(">I", inbuf[:4])
                    if len(inbuf) < 4 + n:
                        break
                    req = json.loads(bytes(inbuf[4:4 + n]))
                    del inbuf[:4 + n]
                    start(req)
            elif kind == "exit":
                sel.unregister(job.pidfd)
                os.close(job.pidfd)
                job.pidfd = -1
            else:
                fd = key.fd
                try:
                    chunk = os.read(fd, 65536)
                except BlockingIOError:
                    continue
                if not chunk:
                    sel.unregister(fd)
                    os.close(fd)
                    job.open -= 1
                else:
                    buf = job.bufs[fd]
                    room = job.req["max_output_bytes"] - len(buf)
                    if len(chunk) > room:
                        buf += chunk[:max(room, 0)]
                        job.trunc[fd] = True
                        if job.killed_for is None and not job.exited:
                            job.killed_for = "max_output_kib"
                            kill(job, signal.SIGKILL)
                    else:
                        buf += chunk
        # reap our children: executions (their pidfd fired) and orphans (we are subreaper)
        while True:
            try:
                pid, status, ru = os.wait3(os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            for j in jobs.values():
                if j.pid == pid and not j.exited:
                    j.status, j.ru, j.exited = status, ru, True
                    kill(j, signal.SIGKILL)  # background children of the execution
                    j.kill_at = time.monotonic() + 0.05
        for j in list(jobs.values()):
            if j.exited and j.open == 0:
                finish(j)
    return 0


if __name__ == "__main__":
    sys.exit(main())
