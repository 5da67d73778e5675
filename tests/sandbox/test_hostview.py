from __future__ import annotations

import os
import sys

import pytest

from polyrl.sandbox import hostview


def test_find_bwrap_and_python_paths():
    assert os.access(hostview.find_bwrap(), os.X_OK)
    paths = hostview.python_paths()
    real = os.path.realpath(sys.executable)
    assert any(real.startswith(p + "/") for p in paths)
    assert any(sys.prefix == p or sys.prefix.startswith(p + "/") for p in paths)
    assert os.getcwd() not in paths or os.getcwd() == sys.prefix


def test_hidden_root():
    import shutil
    import tempfile
    from pathlib import Path

    base = Path(tempfile.mkdtemp(dir="/tmp"))
    try:
        base.chmod(0o755)
        d = base / "hidden"
        (d / "inner").mkdir(parents=True)
        d.chmod(0o700)
        assert hostview._hidden_root(str(d / "inner")) == str(d)
        d.chmod(0o755)
        assert hostview._hidden_root(str(d / "inner")) is None
    finally:
        shutil.rmtree(base)


@pytest.mark.skipif(os.geteuid() != 0, reason="private uids are used only as root")
def test_slots_are_exclusive():
    a, b = hostview.SlotLock(), hostview.SlotLock()
    try:
        assert a.slot != b.slot and a.uid != b.uid
        assert a.uid == hostview.UID_BASE + a.slot - 1
    finally:
        a.release()
        b.release()
