"""The cad modelling language: a small Python subset over manifold3d solids.

This file is self-contained (imports only numpy and manifold3d): its source text
is sent as the prelude of every model program run in the sandbox, and the host
imports it to build target solids from the (trusted) generating programs, so both
sides build bit-identical meshes.

Language (documented to the model in ``DOC``):
    box(x, y, z)                 axis-aligned box, size in mm, centred at the origin
    cylinder(r, h)               radius r, height h along Z, centred at the origin
    sphere(r)                    centred at the origin
    translate(s, x, y, z)        also s.translate(x, y, z)
    rotate(s, x, y, z)           degrees about the X, then Y, then Z axis (origin)
    scale(s, x, y, z)            also s.scale(...)
    union(a, b, ...)  a + b      difference(a, b, ...)  a - b
    intersection(a, b, ...)  a & b
    pi, sqrt, sin, cos, tan (radians), radians, abs, min, max, range, for-loops
    The program assigns the final solid to ``result``.
Curved primitives use ``SEGMENTS`` = 48 facets around.
"""

import base64
import struct
import zlib

import manifold3d
import numpy as np

SEGMENTS = 48
MAX_EMIT_TRIANGLES = 200_000
MESH_TAG = "POLYRL_MESH "

DOC = """Modelling language (a Python subset; units mm; angles in degrees):
box(x, y, z)            box of size x*y*z centred at the origin
cylinder(r, h)          radius r, height h along Z, centred at the origin (48 facets)
sphere(r)               sphere centred at the origin (48 facets)
s.translate(x, y, z)    move; s.rotate(x, y, z) rotates about X, then Y, then Z (origin)
s.scale(x, y, z)        scale about the origin
a + b  union,  a - b  difference,  a & b  intersection
(also union(a, b, ...), difference(a, b, ...), intersection(a, b, ...))
Arithmetic, variables, for-loops over range(), and pi, sqrt, sin, cos, tan, radians.
Assign the final solid to `result`. Reply with the program in a ```python block."""


class Solid:
    """A closed solid (wraps ``manifold3d.Manifold``); combine with + - &."""

    __slots__ = ("m",)

    def __init__(self, m):
        self.m = m

    def translate(self, x=0.0, y=0.0, z=0.0):
        """Moved copy."""
        return Solid(self.m.translate([float(x), float(y), float(z)]))

    def rotate(self, x=0.0, y=0.0, z=0.0):
        """Rotated copy (degrees about X, then Y, then Z)."""
        return Solid(self.m.rotate([float(x), float(y), float(z)]))

    def scale(self, x=1.0, y=None, z=None):
        """Scaled copy (about the origin)."""
        y = x if y is None else y
        z = x if z is None else z
        return Solid(self.m.scale([float(x), float(y), float(z)]))

    def __add__(self, other):
        return Solid(self.m + _solid(other).m)

    def __sub__(self, other):
        return Solid(self.m - _solid(other).m)

    def __and__(self, other):
        return Solid(self.m ^ _solid(other).m)


def _solid(s):
    if not isinstance(s, Solid):
        raise TypeError(f"expected a solid, got {type(s).__name__}")
    return s


def _dims(*values):
    out = [float(v) for v in values]
    if not all(v > 0 and v < 1e6 for v in out):
        raise ValueError(f"sizes must be positive and < 1e6 mm, got {out}")
    return out


def box(x, y, z):
    """Box of size x*y*z mm centred at the origin."""
    return Solid(manifold3d.Manifold.cube(_dims(x, y, z), True))


def cylinder(r, h):
    """Cylinder of radius r, height h along Z, centred at the origin (SEGMENTS facets)."""
    r, h = _dims(r, h)
    return Solid(manifold3d.Manifold.cylinder(h, r, r, SEGMENTS, True))


def sphere(r):
    """Sphere of radius r centred at the origin (SEGMENTS facets)."""
    return Solid(manifold3d.Manifold.sphere(_dims(r)[0], SEGMENTS))


def translate(s, x=0.0, y=0.0, z=0.0):
    """``s`` moved by (x, y, z) mm."""
    return _solid(s).translate(x, y, z)


def rotate(s, x=0.0, y=0.0, z=0.0):
    """``s`` rotated by x, y, z degrees about the X, Y, Z axes (in that order)."""
    return _solid(s).rotate(x, y, z)


def scale(s, x=1.0, y=None, z=None):
    """``s`` scaled about the origin (one factor = uniform)."""
    return _solid(s).scale(x, y, z)


def union(*solids):
    """Union of the solids."""
    out = _solid(solids[0])
    for s in solids[1:]:
        out = out + s
    return out


def difference(a, *solids):
    """``a`` minus every other solid."""
    out = _solid(a)
    for s in solids:
        out = out - s
    return out


def intersection(*solids):
    """Intersection of the solids."""
    out = _solid(solids[0])
    for s in solids[1:]:
        out = out & s
    return out


def mesh_arrays(s):
    """``(vertices (V, 3) float32 mm, triangles (T, 3) int32)`` of solid ``s``."""
    mesh = _solid(s).m.to_mesh()
    verts = np.ascontiguousarray(np.asarray(mesh.vert_properties)[:, :3], dtype=np.float32)
    tris = np.ascontiguousarray(np.asarray(mesh.tri_verts), dtype=np.int32)
    return verts, tris


def encode_mesh(verts, tris):
    """One text line: tag + base64(zlib(V, T as uint32; float32 xyz; int32 triangles))."""
    raw = struct.pack("<II", len(verts), len(tris)) + verts.tobytes() + tris.tobytes()
    return MESH_TAG + base64.b64encode(zlib.compress(raw, 1)).decode("ascii")


def emit(s):
    """Print ``s`` as one encoded mesh line on stdout (the sandbox -> host channel)."""
    if not isinstance(s, Solid):
        raise TypeError(f"`result` must be a solid, got {type(s).__name__}")
    verts, tris = mesh_arrays(s)
    if len(tris) > MAX_EMIT_TRIANGLES:
        print(f"{MESH_TAG}TOOBIG {len(tris)}")
        return
    print(encode_mesh(verts, tris))


pi = float(np.pi)
sqrt, sin, cos, tan, radians = np.sqrt, np.sin, np.cos, np.tan, np.radians

NAMES = {
    "box": box, "cylinder": cylinder, "sphere": sphere, "translate": translate,
    "rotate": rotate, "scale": scale, "union": union, "difference": difference,
    "intersection": intersection, "pi": pi, "sqrt": sqrt, "sin": sin, "cos": cos, "tan": tan,
    "radians": radians, "abs": abs, "min": min, "max": max, "range": range,
}
"""Every name a program may use (besides its own variables)."""


def build(program):
    """Run a trusted ``program`` in-process; returns its ``result`` solid.

    Used on the host for generator (oracle) programs only; model programs run in
    the sandbox.
    """
    scope = {"__builtins__": {}, **NAMES}
    exec(compile(program, "<cad>", "exec"), scope)
    return _solid(scope.get("result"))
