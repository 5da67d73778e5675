"""Fixtures of the sandbox tests: one bwrap Sandbox and one ForkServer per session."""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator

import pytest

from polyrl.errors import SandboxUnavailableError
from polyrl.sandbox import ForkServer, Limits, Sandbox
from polyrl.sandbox.warm import warm_pool


def kernel_landlock_abi() -> int:
    """This kernel's Landlock ABI (0: none)."""
    import ctypes

    return max(0, ctypes.CDLL(None, use_errno=True).syscall(444, None, 0, 1))


def has_landlock() -> bool:
    """Whether this kernel has Landlock (any ABI)."""
    return kernel_landlock_abi() >= 1


@pytest.fixture(scope="session", params=["warm", "warm-unscoped", "cold"])
def sb(request) -> Sandbox:
    """The bwrap sandbox, with warm sandboxes (the default), with warm sandboxes but no
    Landlock signal/socket scope (as on Linux < 6.12, which lacks it), and cold (new
    namespaces per execution): every security test runs on all three paths. The session
    fails loudly (not skips) when bwrap cannot run."""
    box = Sandbox(backend="bwrap", limits=Limits(timeout_s=10, cpu_s=10),
                  warm=request.param != "cold")
    box._signal_scope = request.param != "warm-unscoped"
    try:
        box.run(["true"])
    except SandboxUnavailableError as e:  # pragma: no cover - host specific
        pytest.fail(f"bwrap backend unavailable on this host: {e}")
    if request.param != "cold":
        why = warm_pool(box.python, box.limits.max_file_mib, box._signal_scope).unavailable
        if why:  # pragma: no cover - kernels without Landlock
            pytest.skip(f"warm sandboxes unavailable here (cold tested): {why}")
    return box


def is_warm(box: Sandbox) -> bool:
    """Whether ``box`` runs its executions in warm sandboxes."""
    return box.warm and warm_pool(box.python, box.limits.max_file_mib,
                                  box._signal_scope).unavailable is None


@pytest.fixture(scope="session")
def fs():
    """A fork-server with numpy preloaded, shared by the tests that need one."""
    with ForkServer(preload=["numpy"], limits=Limits(timeout_s=10, cpu_s=10), workers=2) as f:
        yield f


def tmp_skeleton() -> list[str]:
    """What a sandbox's fresh /tmp holds before anything runs: the first directory of
    each read-only bind of the Python installation that lives under /tmp (a checkout
    or venv there), else nothing."""
    from polyrl.sandbox import hostview

    return sorted({p.split("/")[2] for p in hostview.python_paths() if p.startswith("/tmp/")})


def fill_inodes(dirs: tuple[str, ...]) -> str:
    """A program that creates empty files in each of ``dirs`` until it fails (at most
    5000) and prints ``dir f_files created errno`` per directory that ran out."""
    return f"""
import os
for d in {dirs!r}:
    total, n = os.statvfs(d).f_files, 0
    try:
        while n < 5000:
            os.close(os.open("%s/f%d" % (d, n), os.O_CREAT | os.O_WRONLY)); n += 1
    except OSError as e:
        print(d, total, n, e.errno)
"""


@contextlib.contextmanager
def descriptors_in_flight(flood: bool) -> Iterator[None]:
    """Hold this uid's lock on descriptors in flight (SCM_RIGHTS): shared for a test whose
    program passes a few, exclusive (``flood``) for one that floods them. The kernel
    counts them per uid and refuses a send past the sender's ``RLIMIT_NOFILE``: as a
    normal user (``pytest -n 2``) a flood in one worker failed the other's programs."""
    path = os.path.join(tempfile.gettempdir(), f"polyrl-tests-scm-rights-{os.getuid()}.lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if flood else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)


@pytest.fixture
def passes_descriptors() -> Iterator[None]:
    """For a test whose program passes descriptors (``descriptors_in_flight``)."""
    with descriptors_in_flight(flood=False):
        yield
