from __future__ import annotations

import pytest

from polyrl.errors import SandboxError
from polyrl.sandbox import Limits, Sandbox


def test_session_cwd_files_snapshot_restore(sb: Sandbox):
    with sb.session(limits=Limits(timeout_s=5)) as s:
        r = s.run("mkdir -p sub/deeper && cd sub && echo hello > f.txt && pwd")
        assert r.stdout.strip() == "/workspace/sub" and r.exit_code == 0
        assert s.cwd == "/workspace/sub"
        r = s.run("ls -l")
        assert "f.txt" in r.stdout and "deeper" in r.stdout
        assert r.argv == ["bash", "-c", "ls -l"]
        s.write_file("a.txt", "hi")
        assert s.read_file("a.txt") == b"hi"
        assert s.read_file("sub/f.txt") == b"hello\n"
        snap = s.snapshot()
        s.run("cd .. && rm -rf sub a.txt && echo new > b.txt && cd /workspace")
        assert s.cwd == "/workspace"
        assert s.run("ls").stdout.split() == ["b.txt"]
        s.restore(snap)
        assert s.cwd == "/workspace/sub"
        assert s.run("ls /workspace").stdout.split() == ["a.txt", "sub"]
        # argv steps run in the session cwd too
        assert s.run(["cat", "f.txt"]).stdout == "hello\n"
        # a step that fails or times out keeps the session usable
        r = s.run("sleep 10", limits=Limits(timeout_s=0.5))
        assert r.limit_hit == "timeout_s"
        assert s.run("cat f.txt").stdout == "hello\n"
    with pytest.raises(SandboxError, match="closed"):
        s.run("true")


def test_snapshot_of_other_session_rejected(sb: Sandbox):
    with sb.session() as a, sb.session() as b:
        snap = a.snapshot()
        with pytest.raises(SandboxError, match="does not belong"):
            b.restore(snap)


def test_process_backend_session_keeps_cwd():
    with Sandbox(backend="process", limits="strict").session() as s:
        assert s.run("mkdir -p a/b && cd a/b && pwd").stdout.strip().endswith("/a/b")
        assert s.cwd == "/workspace/a/b"
        assert s.run("touch here; ls").stdout.strip() == "here"
        assert s.read_file("a/b/here") == b""


def test_from_config():
    from polyrl.config import SandboxSection

    sb = Sandbox.from_config(SandboxSection(backend="process", preset="strict"))
    assert sb.backend == "process" and sb.limits.timeout_s == 5.0 and not sb.warm
    assert Sandbox.from_config(SandboxSection()).warm
    assert not Sandbox.from_config(SandboxSection(warm=False)).warm


def test_fifos_in_the_workspace_are_refused_not_waited_on(sb: Sandbox):
    import pytest

    from polyrl.errors import SandboxError

    with sb.session() as s:
        assert s.run("mkfifo notes.txt").exit_code == 0
        with pytest.raises(SandboxError, match="not a regular file"):
            s.write_file("notes.txt", "x")  # would block forever on the fifo
        s.snapshot()  # a fifo is made anew there, never opened
        assert s.run("rm notes.txt && echo ok > notes.txt").exit_code == 0
        s.write_file("notes.txt", "new")
        assert s.read_file("notes.txt") == b"new"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("plant", ["mkfifo", "mkdir"])
def test_a_planted_control_file_neither_hangs_nor_breaks_the_session(sb: Sandbox, plant: str):
    with sb.session(limits=Limits(timeout_s=5)) as s:
        s.run(f"cd sub 2>/dev/null; trap - EXIT; rm -f /run/polyrl/cwd; {plant} /run/polyrl/cwd")
        assert s.cwd == "/workspace"  # the old cwd is kept
        r = s.run("mkdir -p d && cd d && pwd")
        assert r.stdout.strip() == "/workspace/d" and s.cwd == "/workspace/d"


def test_a_step_cannot_write_beside_its_control_file(sb: Sandbox):
    """Only the cwd file is bound into the sandbox, not its host directory: nothing
    measured that directory (one step wrote 58 MiB and 3,000 files there under a 4 MiB
    budget, kept on the host until the session closed)."""
    import os

    with sb.session(limits=Limits(timeout_s=5, max_file_mib=1)) as s:
        r = s.run("head -c 900000 /dev/zero > /run/polyrl/f1; head -c 900000 /dev/zero"
                  " > /run/polyrl/f2; : > /run/polyrl/e; mkdir /run/polyrl/d; cd /tmp; pwd")
        assert r.stdout.strip() == "/tmp"
        assert sorted(os.listdir(s._ctl)) == ["cwd"]
        assert s.cwd == "/workspace"  # outside the workspace: not taken
        assert s.run("mkdir -p a && cd a").exit_code == 0 and s.cwd == "/workspace/a"


def test_snapshot_keeps_sparse_files_sparse(sb: Sandbox):
    """A sparse file takes no block in the workspace (nothing the measure counts); a
    snapshot that writes its holes as zeros filled the host (40 of 16 MiB: 641 MiB
    from a 4 KiB workspace)."""
    import os

    from polyrl.sandbox.diskguard import tree_usage

    with sb.session(limits=Limits(timeout_s=5, max_file_mib=16)) as s:
        r = s.run("for i in $(seq 1 8); do truncate -s 16M s$i; done; mkdir d; "
                  "printf ab > d/m; truncate -s 9M d/m; printf cd >> d/m; ln d/m d/m2")
        assert r.exit_code == 0, r.stderr
        before = tree_usage(s.workspace.path)[0]
        snap = s.snapshot()
        assert tree_usage(snap.path)[0] <= before + (1 << 20)
        s.run("rm -rf *")
        s.restore(snap)
        assert tree_usage(s.workspace.path)[0] <= before + (1 << 20)
        data = s.read_file("d/m")
        assert len(data) == 9 * 1024 * 1024 + 2 and data[:2] == b"ab" and data[-2:] == b"cd"
        assert data[2:-2].count(0) == len(data) - 4
        assert os.stat(os.path.join(s.workspace.path, "d/m2")).st_nlink == 2
        assert s.run("stat -c %s s8").stdout.strip() == str(16 << 20)


def test_snapshot_of_a_workspace_with_a_fifo_and_a_socket(sb: Sandbox):
    """A step's ``mkfifo`` or a unix socket bound in the workspace made ``snapshot()``
    raise ``SandboxError``: the program's own doing read as a sandbox failure. Named
    pipes are made anew; sockets (nothing listens once the step is over) left out."""
    with sb.session() as s:
        r = s.run("mkfifo p && chmod 640 p && printf x > f && python3 -c \"import socket; "
                  "socket.socket(socket.AF_UNIX).bind('sock')\" && ls -F")
        assert r.exit_code == 0 and r.stdout.split() == ["f", "p|", "sock="], r
        snap = s.snapshot()
        s.run("rm -f p f sock")
        s.restore(snap)
        assert s.run("stat -c '%F %a' p; cat f; ls").stdout.split("\n") == [
            "fifo 640", "xf", "p", ""]


def test_snapshot_of_a_too_deep_tree_fails_typed_and_leaves_nothing(sb: Sandbox):
    import os

    with sb.session(limits=Limits(timeout_s=5)) as s:
        r = s.run("python3 -c \"import os\nfor i in range(1200): os.mkdir('d'); os.chdir('d')\"")
        assert r.exit_code == 0, r.stderr
        with pytest.raises(SandboxError, match="cannot snapshot"):
            s.snapshot()  # was a RecursionError, its partial copy left until close
        assert os.listdir(s._snap_dir) == []
        assert s.run("echo ok").stdout == "ok\n"


def test_a_snapshot_never_holds_a_setuid_file(sb: Sandbox):
    """A program's `chmod 6755` file was copied into the snapshot with its setuid and
    setgid bits, owned by the host user (root, when polyrl runs as root)."""
    import os
    import stat

    with sb.session() as s:
        assert s.run("cp /bin/true t && chmod 6755 t && chmod 1777 .").exit_code == 0
        snap = s.snapshot()
        mode = os.lstat(os.path.join(snap.path, "t")).st_mode
        assert stat.S_IMODE(mode) == 0o755, oct(mode)
        s.restore(snap)
        assert s.run("./t").exit_code == 0  # still runs


def test_a_forked_copy_of_the_host_neither_uses_nor_ends_the_session(sb: Sandbox):
    """A host process forked while a session is open (multiprocessing, a data loader)
    held a copy of it: its exit (atexit) stopped the keeper and removed the workspace,
    so the opener's next step failed. Now only the opener owns it; the fork gets an error."""
    import atexit
    import os

    with sb.session() as s:
        s.write_file("a.txt", "hello")
        pid = os.fork()
        if pid == 0:
            code = 3
            try:
                s.run("true")
            except SandboxError as e:
                code = 0 if "belongs to process" in str(e) else 4
            except BaseException:
                code = 5
            atexit._run_exitfuncs()  # as the fork's interpreter does when it exits
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        r = s.run("cat a.txt")
        assert r.exit_code == 0 and r.stdout == "hello", r
        assert s.read_file("a.txt") == b"hello"
        assert os.waitstatus_to_exitcode(status) == 0


def test_restore_refuses_a_snapshot_path_that_leaves_the_session(sb: Sandbox):
    """Before: a path starting with the snapshot folder but going up through '..'
    copied that host tree (here /etc) into the workspace."""
    import dataclasses

    with sb.session() as s:
        snap = s.snapshot()
        for path in (snap.path + "/../../../etc", s._snap_dir + "/../../etc"):
            with pytest.raises(SandboxError):
                s.restore(dataclasses.replace(snap, path=path))
        with pytest.raises(SandboxError):
            s.restore(dataclasses.replace(snap, id="..", path=s._snap_dir + "/.."))
        assert s.run("ls").stdout == ""
        s.restore(snap)


def test_a_step_cannot_lock_the_later_steps_out_of_the_workspace(sb: Sandbox):
    """`chmod 000 /workspace` made every later step fail to start (bwrap: Can't chdir)."""
    with sb.session() as s:
        s.run("echo kept > f && chmod 000 /workspace")
        r = s.run("cat f && stat -c %a /workspace")
        assert r.exit_code == 0 and r.stdout == "kept\n700\n", r
