from __future__ import annotations

import os

import pytest

from polyrl.errors import ConfigError, SandboxError
from polyrl.sandbox.workspace import Workspace


def test_write_read_collect_snapshot(tmp_path):
    ws = Workspace()
    try:
        ws.write_files({"a/b.txt": "hi", "c.bin": b"\x00\x01"})
        assert ws.read_file("a/b.txt") == b"hi"
        os.symlink("/etc/passwd", os.path.join(ws.path, "link"))
        assert ws.collect(["a/b.txt", "link", "missing"]) == {"a/b.txt": b"hi"}
        with pytest.raises(SandboxError, match="symlink"):
            ws.read_file("link")
        with pytest.raises(ConfigError):
            ws.write_files({"../escape": "x"})
        ws.snapshot_to(str(tmp_path / "snap"))
        ws.write_files({"new.txt": "n"})
        ws.restore_from(str(tmp_path / "snap"))
        assert sorted(os.listdir(ws.path)) == ["a", "c.bin", "link"]
        assert os.path.islink(os.path.join(ws.path, "link"))
    finally:
        ws.remove()
    assert not os.path.exists(ws.path)
    assert oct(os.stat(os.path.dirname(ws.path)).st_mode & 0o777) == "0o711"
