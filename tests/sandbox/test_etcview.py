"""The sandbox's /etc copy: only what every local user may read, permissions never widened."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from polyrl.sandbox import Sandbox, etcview


def _tree(root: Path) -> None:
    (root / "passwd").write_text("root:x:0:0::/root:/bin/sh\n")
    (root / "passwd").chmod(0o644)
    (root / "shadow").write_text("root:$6$secret\n")
    (root / "shadow").chmod(0o640)
    ssl = root / "ssl"
    (ssl / "certs").mkdir(parents=True)
    (ssl / "certs" / "ca.pem").write_text("CERT")
    (ssl / "certs" / "ca.pem").chmod(0o644)
    (ssl / "certs" / "link.pem").symlink_to("ca.pem")
    (ssl / "certs" / "outside.pem").symlink_to("/root/.ssh/id_rsa")  # copied as a link
    (ssl / "private").mkdir(mode=0o710)
    (ssl / "private").chmod(0o710)  # root and group ssl-cert only, as on Debian
    (ssl / "private" / "server.key").write_text("PRIVATE KEY")
    (ssl / "private" / "server.key").chmod(0o644)  # readable, but its directory is not
    (ssl / "local.key").write_text("KEY")
    (ssl / "local.key").chmod(0o600)
    (ssl / "setuid").write_text("x")
    (ssl / "setuid").chmod(0o4755)
    os.mkfifo(ssl / "fifo", 0o666)
    (root / "real-localtime").write_text("TZif")
    (root / "real-localtime").chmod(0o644)
    (root / "localtime").symlink_to(root / "real-localtime")
    (root / "secret-target").write_text("S")
    (root / "secret-target").chmod(0o600)
    (root / "hosts").symlink_to(root / "secret-target")


def test_only_world_readable_entries_are_copied(tmp_path: Path):
    src, dest = tmp_path / "etc", tmp_path / "copy"
    src.mkdir()
    dest.mkdir()
    _tree(src)
    etcview.copy_etc(str(dest), str(src), ("passwd", "shadow", "ssl", "localtime", "hosts",
                                           "missing"))
    found = sorted(str(p.relative_to(dest)) for p in dest.rglob("*"))
    assert found == ["localtime", "passwd", "ssl", "ssl/certs", "ssl/certs/ca.pem",
                     "ssl/certs/link.pem", "ssl/certs/outside.pem", "ssl/setuid"]
    assert (dest / "localtime").read_text() == "TZif" and not (dest / "localtime").is_symlink()
    assert os.readlink(dest / "ssl/certs/outside.pem") == "/root/.ssh/id_rsa"
    assert os.readlink(dest / "ssl/certs/link.pem") == "ca.pem"
    # permissions are the host's, never widened; special bits dropped
    assert stat.S_IMODE((dest / "passwd").stat().st_mode) == 0o644
    assert stat.S_IMODE((dest / "ssl/setuid").stat().st_mode) == 0o755
    assert stat.S_IMODE(dest.stat().st_mode) == 0o755


def test_the_sandbox_sees_no_etc_file_other_users_cannot_read(sb: Sandbox):
    res = sb.run_python(
        "import os\n"
        "for root, dirs, files in os.walk('/etc'):\n"
        "    for n in files:\n"
        "        p = os.path.join(root, n)\n"
        "        if not os.path.islink(p):\n"
        "            print(p)\n")
    assert res.exit_code == 0, res.stderr
    paths = res.stdout.split()
    assert "/etc/passwd" in paths
    for p in paths:
        top = Path("/etc", *Path(p).parts[2:3])
        host = Path(p)
        if top.is_symlink():  # a top-level link is copied as the file it names
            continue
        mode = host.stat().st_mode
        assert mode & 0o004, f"{p} is not world-readable on the host"
        for parent in host.parents:
            if parent == Path("/etc"):
                break
            assert parent.stat().st_mode & 0o005 == 0o005, f"{parent} hides {p}"


@pytest.mark.parametrize("name", ["shadow", "gshadow", "sudoers"])
def test_secrets_are_not_in_the_view(name: str):
    assert not os.path.lexists(os.path.join(etcview.etc_view(), name))


def test_a_forked_childs_exit_keeps_the_view_and_a_lost_view_is_made_again():
    import shutil

    path = etcview.etc_view()
    pid = os.fork()
    if pid == 0:  # a child that exits normally runs the atexit handlers it inherited
        import atexit

        atexit._run_exitfuncs()
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.path.isfile(os.path.join(path, "passwd"))
    shutil.rmtree(path)  # e.g. a cleaner of /dev/shm
    again = etcview.etc_view()
    assert again != path and os.path.isfile(os.path.join(again, "passwd"))
    assert Sandbox(warm=False).run(["cat", "/etc/passwd"]).exit_code == 0


def test_a_sandbox_that_fails_to_set_up_is_an_error_not_a_program_exit(monkeypatch, tmp_path):
    """bwrap reports its child's pid before the mounts: a bind source missing then used to
    end as the program's ``exit_code=1``."""
    from polyrl.errors import SandboxError

    monkeypatch.setattr(etcview, "etc_view", lambda: str(tmp_path / "gone"))
    cold = Sandbox(warm=False)
    with pytest.raises(SandboxError, match="failed to set up the sandbox: .*gone"):
        cold.run(["true"])
    res = cold.run(["true"], raise_errors=False)
    assert res.error == "SandboxError" and res.exit_code is None
