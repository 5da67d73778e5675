"""Fixtures of the sandbox tests: one bwrap Sandbox and one ForkServer per session."""

from __future__ import annotations

import pytest

from polyrl.errors import SandboxUnavailableError
from polyrl.sandbox import ForkServer, Limits, Sandbox


@pytest.fixture(scope="session")
def sb() -> Sandbox:
    """The bwrap sandbox; the session fails loudly (not skips) when bwrap cannot run."""
    box = Sandbox(backend="bwrap", limits=Limits(timeout_s=10, cpu_s=10))
    try:
        box.run(["true"])
    except SandboxUnavailableError as e:  # pragma: no cover - host specific
        pytest.fail(f"bwrap backend unavailable on this host: {e}")
    return box


@pytest.fixture(scope="session")
def fs():
    """A fork-server with numpy preloaded, shared by the tests that need one."""
    with ForkServer(preload=["numpy"], limits=Limits(timeout_s=10, cpu_s=10), workers=2) as f:
        yield f
