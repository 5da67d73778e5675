"""Compare a candidate mesh with the target: the four reward components of ``cad/gen-v1``.

Components (each in [0, 1]):
    iou: volumetric IoU of the two ray-parity occupancy grids (64 samples per axis
        over the union of both bounding boxes, padded 5%).
    chamfer: ``clip(1 - (d - 0.01) / 0.10, 0, 1)`` where ``d`` is the symmetric Chamfer
        distance of 1024 surface samples per mesh divided by the target's bounding-box
        diagonal, minus the target's own sampling noise (the Chamfer distance between two
        independent samplings of the target, about 0.005-0.022 of the diagonal), floored
        at 0. So the same shape triangulated differently gets d near 0, an identical
        mesh exactly 0, and d >= 0.11 scores 0.
    silhouette: mean 2D IoU of the orthographic silhouettes along X, Y and Z.
    valid: watertight (each directed edge matched by its reverse), positive volume, at
        most ``TRIANGLE_BUDGET`` triangles.
Monitored (weight 0): ``chamfer_norm`` (``d``), ``triangles``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from polyrl.domains.cad.metrics import (
    Frame,
    Raster,
    bbox,
    chamfer,
    iou,
    is_watertight,
    rasterize,
    sample_surface,
    silhouette_similarity,
    volume,
)

TRIANGLE_BUDGET = 20_000
N_SAMPLES = 1024
CHAMFER_DEAD_ZONE = 0.01
CHAMFER_ZERO_AT = 0.11
RES = 64


@dataclass(frozen=True)
class Mesh:
    """A triangle mesh: ``verts (V, 3) float32`` mm, ``tris (T, 3) int32``."""

    verts: np.ndarray
    tris: np.ndarray


@dataclass(frozen=True)
class ShapeScores:
    """The measured components (see module docstring)."""

    iou: float
    chamfer: float
    chamfer_norm: float
    silhouette: float
    valid: float
    triangles: int


class TargetCache:
    """Per-target precomputation: samples, diagonal and rasters by frame (LRU)."""

    def __init__(self, target: Mesh) -> None:
        self.target = target
        self.box = bbox(target.verts)
        self.diag = float(np.linalg.norm(self.box[1] - self.box[0]))
        self.samples = sample_surface(target.verts, target.tris, N_SAMPLES)
        resampled = sample_surface(target.verts, target.tris, N_SAMPLES, seed=1)
        self.noise = chamfer(self.samples, resampled) / self.diag  # sampling noise floor
        self.default_frame = Frame.around(self.box, res=RES)
        self._raster = lru_cache(maxsize=8)(self._rasterize)

    def _rasterize(self, frame: Frame) -> Raster:
        return rasterize(self.target.verts, self.target.tris, frame)

    def frame_for(self, cand_box: np.ndarray) -> Frame:
        """The target's own frame when the candidate fits inside it, else the union."""
        f = self.default_frame
        if np.all(cand_box[0] >= np.asarray(f.lo)) and np.all(cand_box[1] <= np.asarray(f.hi)):
            return f
        return Frame.around(self.box, cand_box, res=RES)

    def raster(self, frame: Frame) -> Raster:
        """The target rasterised on ``frame`` (cached)."""
        return self._raster(frame)


def compare(cache: TargetCache, cand: Mesh) -> ShapeScores:
    """All components for ``cand`` against the cached target (pure numpy, host side)."""
    n_tris = int(len(cand.tris))
    if n_tris == 0 or len(cand.verts) == 0:
        return ShapeScores(0.0, 0.0, float("inf"), 0.0, 0.0, n_tris)
    valid = is_watertight(cand.tris) and volume(cand.verts, cand.tris) > 0 \
        and n_tris <= TRIANGLE_BUDGET
    cbox = bbox(cand.verts)
    frame = cache.frame_for(cbox)
    rt, rc = cache.raster(frame), rasterize(cand.verts, cand.tris, frame)
    raw = chamfer(cache.samples, sample_surface(cand.verts, cand.tris, N_SAMPLES)) / cache.diag
    d = max(0.0, raw - cache.noise)
    ch = float(np.clip(1 - (d - CHAMFER_DEAD_ZONE) / (CHAMFER_ZERO_AT - CHAMFER_DEAD_ZONE), 0, 1))
    return ShapeScores(
        iou=float(iou(rt.occ, rc.occ)),
        chamfer=ch,
        chamfer_norm=float(d),
        silhouette=silhouette_similarity(rt, rc),
        valid=1.0 if valid else 0.0,
        triangles=n_tris,
    )


def save_mesh(mesh: Mesh, path: str) -> None:
    """Write ``mesh`` to ``path`` (format from the suffix: .stl, .obj, .ply, .glb) via trimesh.

    For inspecting a model's part; scoring itself never needs it.
    """
    import trimesh

    trimesh.Trimesh(vertices=mesh.verts, faces=mesh.tris, process=False).export(path)
