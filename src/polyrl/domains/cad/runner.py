"""Run a model's cad program in the sandbox and bring its mesh back to the host.

The program runs in a ``polyrl.sandbox.ForkServer`` whose warm interpreter has
numpy and manifold3d imported (one forked child per program, no interpreter
start-up). The code sent is the language prelude (``dsl.py``'s own source), the
program, and ``emit(result)``, which prints the mesh as one tagged base64 line;
the host decodes it into numpy arrays.
"""

from __future__ import annotations

import atexit
import base64
import struct
import threading
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from polyrl.domains.cad.dsl import MAX_EMIT_TRIANGLES, MESH_TAG
from polyrl.domains.cad.scoring import Mesh
from polyrl.errors import SandboxError
from polyrl.types import ExecResult

_PRELUDE = Path(__file__).with_name("dsl.py").read_text(encoding="utf-8")
_LOCK = threading.Lock()
_SERVER: Any = None


@dataclass(frozen=True)
class RunOutcome:
    """A program's run: ``mesh`` (None when it failed) and ``failure`` (why, else "")."""

    mesh: Mesh | None
    failure: str
    exec_result: ExecResult | None = None


def decode_mesh(line: str) -> Mesh:
    """Inverse of ``dsl.encode_mesh`` (``line`` without the tag).

    Raises:
        ValueError: malformed payload.
    """
    raw = zlib.decompress(base64.b64decode(line.strip(), validate=True))
    n_v, n_t = struct.unpack_from("<II", raw)
    if n_t > MAX_EMIT_TRIANGLES:  # emit never sends more; the rasteriser is O(T * pixels)
        raise ValueError(f"{n_t} triangles, more than {MAX_EMIT_TRIANGLES}")
    off = 8
    verts = np.frombuffer(raw, np.float32, n_v * 3, off).reshape(n_v, 3)
    off += n_v * 12
    tris = np.frombuffer(raw, np.int32, n_t * 3, off).reshape(n_t, 3)
    if n_t and (tris.min() < 0 or tris.max() >= n_v):
        raise ValueError("triangle index out of range")
    if not np.isfinite(verts).all():
        raise ValueError("non-finite vertex")
    return Mesh(verts, tris)


def default_server() -> Any:
    """The process-wide ForkServer (numpy + manifold3d preloaded), started on first use.

    Falls back to a plain ``Sandbox`` (one interpreter start per program, slower)
    when this polyrl build has no ForkServer.

    Raises:
        SandboxError: the sandbox cannot start here.
    """
    global _SERVER
    with _LOCK:
        if _SERVER is None:
            import polyrl.sandbox as sandbox

            if hasattr(sandbox, "ForkServer"):
                _SERVER = sandbox.ForkServer(preload=["numpy", "manifold3d"], limits="default")
                atexit.register(_close_server)
            else:
                _SERVER = sandbox.Sandbox(limits="default")
        return _SERVER


def _close_server() -> None:
    global _SERVER
    if _SERVER is not None and hasattr(_SERVER, "close"):
        _SERVER.close()
    _SERVER = None


def run_program(program: str, server: Any = None) -> RunOutcome:
    """Execute ``program`` in the sandbox; returns its mesh or why there is none.

    Args:
        program: model-written source in the modelling language.
        server: anything with ``run_python(code) -> ExecResult``; default ``default_server()``.

    Raises:
        SandboxError: the sandbox itself failed (``ExecResult.error`` set).
    """
    server = server or default_server()
    # The program runs in its own scope (the language's names, no builtins), never in the
    # prelude's module scope, whose chr/exec/print/emit it could otherwise reach.
    code = f"{_PRELUDE}\n\nemit(build({program!r}))\n"
    res: ExecResult = server.run_python(code)
    if res.error:
        raise SandboxError(f"cad program run failed in the sandbox: {res.error}: "
                           f"{res.error_message}")
    if res.exit_code != 0 or res.limit_hit:
        tail = res.stderr.strip().splitlines()[-1:] or [f"exit {res.exit_code}"]
        why = f"limit {res.limit_hit}" if res.limit_hit else tail[0]
        return RunOutcome(None, f"program failed: {why}"[:300], res)
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith(MESH_TAG)]
    if not lines:
        return RunOutcome(None, "program printed no mesh", res)
    payload = lines[-1][len(MESH_TAG):]
    if payload.startswith("TOOBIG"):
        return RunOutcome(None, f"mesh too large: {payload}", res)
    try:
        return RunOutcome(decode_mesh(payload), "", res)
    except (ValueError, zlib.error, struct.error) as e:
        return RunOutcome(None, f"undecodable mesh: {e}", res)
