"""Compare a candidate mesh with the target: the reward components of ``cad/gen-v1``.

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
    features: agreement of the holes, pockets and slots, each feature counted once
        whatever its size. Both occupancy grids give their enclosed voids
        (``metrics.enclosed_voids``: empty cells walled in by material within a slice
        along X, Y or Z), split into 26-connected components: one per hole, pocket or
        keyway. Each target component ``T_k`` scores ``|T_k & C| / |T_k | C_k|``, with
        ``C`` the candidate's voids and ``C_k`` the candidate components that overlap
        ``T_k`` (the IoU of the hole with its counterpart); each candidate component of
        at least ``SPURIOUS_MIN_CELLS`` cells that overlaps no target void scores 0
        (a hole that should not be there). ``features`` is the mean of these scores,
        1.0 when neither part has voids. The global measures above hardly move when a
        small hole is missing (a 100 x 50 x 9 plate with a 4 mm hole: IoU 0.997 for
        the plain box); this term is 0 for the target's bounding box or the target
        with its holes filled, (k-1)/k with one of k holes missing, and a hole moved
        or resized keeps its IoU with the right one.
    valid: watertight (each directed edge matched by its reverse), positive volume, at
        most ``TRIANGLE_BUDGET`` triangles; a mesh over the budget scores 0 on every term
        (it is not measured: the rasteriser's cost grows with triangles x pixels).
    extra: no material the target lacks, where the measures above are blind to it: the
        product of three factors. Shells: 1 when the candidate has at most as many closed
        surfaces as the target, else ``target / candidate`` shells (a disconnected speck
        anywhere, even inside a hole, is one more shell; so is a sealed internal
        cavity). Surfaces that come within ``SHELL_TOUCH`` (0.1%) of the target's
        diagonal of each other count as one, for both meshes
        (``metrics.touching_shells``): a boss built to stand on a plate whose faces miss
        by float noise (a height written 3.3333 for 10/3, a step 1e-9 mm off) is one
        part, not a part and a speck (it scored 0.95 and failed with IoU 1.0). 0.1%
        is 0.016-0.13 mm on the generated parts (diagonals 16-130 mm): above the
        rounding of numbers written to two decimals, a tenth of a raster cell and far
        below any feature, so a speck in a hole (a radius >= 2 mm away) or past a
        corner still counts. Extent: ``clip(1 - (o - 0.01) / 0.10, 0, 1)``
        (``EXTENT_DEAD_ZONE``, ``EXTENT_ZERO_AT``) with ``o`` (``overhang``) the
        farthest the candidate's bounding box reaches out of the target's along any
        axis, divided by the target's diagonal. Reach: ``clip(1 - (h - 0.02) / 0.10, 0,
        1)`` (``HAUSDORFF_DEAD_ZONE``, ``HAUSDORFF_ZERO_AT``) with ``h`` (``hausdorff``)
        the directed Hausdorff distance from the candidate to the target's solid over
        the target's diagonal: the farthest any candidate vertex, edge midpoint or
        area sample (``probe_points``) lies from the target's material (0 inside it, so
        the faces where touching pieces meet cost nothing; ``hausdorff_to_target``,
        exact above 0.02, an upper bound within the target's sampling spacing below).
        Junk joined to the part by a 0.01 mm rod and kept inside its box (a 0.3 mm
        cube in the middle of a hole) is one shell with no overhang: it scored 1.0 and
        passed on 48 of 48 plates; it lies a hole radius (1.9-6.2% of the diagonal
        there) from the material: 44 now fail ``passed`` and lose up to 0.04 (the 4
        whose hole's radius is under 2% of the diagonal still score 1.0 and pass).
        Without the first two factors the oracle's mesh plus a 0.01 mm cube 1000 mm
        away scored 1.0 and passed: Chamfer samples by area and never land on the
        speck, the target-frame raster clips it, and on the union frame it falls
        between rays. The same solid triangulated differently keeps its shells and its
        box (a cylinder's facets turned: ``o`` = 0) and lies on the target's surface
        (within the facets' sagitta, under 0.1%; ``h`` reads under 0.02), so scores 1.
Monitored (weight 0): ``chamfer_norm`` (``d``), ``triangles``, ``features_min`` (the
lowest of the per-component scores behind ``features``, gated by ``Score.passed``),
``target_features`` (the target's void components), ``extra_shells`` (candidate shells
beyond the target's), ``overhang`` (``o``) and ``hausdorff`` (``h``); ``Score.passed``
gates the last three.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import ndimage
from scipy.spatial import cKDTree

from polyrl.domains.cad.metrics import (
    Frame,
    Raster,
    bbox,
    chamfer,
    enclosed_voids,
    iou,
    is_watertight,
    point_mesh_distance,
    rasterize,
    sample_surface,
    shells,
    silhouette_similarity,
    surface_points,
    touching_shells,
    unique_edges,
    volume,
    winding_number,
)

TRIANGLE_BUDGET = 20_000
N_SAMPLES = 1024
CHAMFER_DEAD_ZONE = 0.01
CHAMFER_ZERO_AT = 0.11
RES = 64
SPURIOUS_MIN_CELLS = 16
EXTENT_DEAD_ZONE = 0.01
EXTENT_ZERO_AT = 0.11
SHELL_TOUCH = 1e-3
HAUSDORFF_DEAD_ZONE = 0.02
HAUSDORFF_ZERO_AT = 0.12
HAUSDORFF_MAX_SAMPLES = 16_384
HAUSDORFF_MAX_EXACT = 2048
_CONNECT_26 = np.ones((3, 3, 3), dtype=bool)


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
    features: float = 0.0
    features_min: float = 0.0
    target_features: int = 0
    extra: float = 0.0
    extra_shells: int = 0
    overhang: float = float("inf")
    hausdorff: float = float("inf")


@dataclass(frozen=True)
class Voids:
    """Enclosed voids of an occupancy grid, stored sparse (a target cache keeps them).

    ``index``: flat grid index of each void cell; ``label``: its component, 1..``n``;
    ``sizes`` (n + 1,): cells per component (index 0 unused); ``size``: grid cells.
    """

    index: np.ndarray
    label: np.ndarray
    n: int
    sizes: np.ndarray
    size: int

    @staticmethod
    def of(occ: np.ndarray) -> Voids:
        """The enclosed voids of occupancy grid ``occ``, labelled (see ``metrics``)."""
        labels, n = ndimage.label(enclosed_voids(occ), structure=_CONNECT_26)
        flat = labels.ravel()
        index = np.flatnonzero(flat)
        label = flat[index]
        return Voids(index, label, int(n), np.bincount(label, minlength=n + 1), int(occ.size))


class TargetCache:
    """Per-target precomputation: samples, diagonal, rasters and voids by frame (LRU)."""

    def __init__(self, target: Mesh) -> None:
        self.target = target
        self.box = bbox(target.verts)
        self.diag = float(np.linalg.norm(self.box[1] - self.box[0]))
        self.samples = sample_surface(target.verts, target.tris, N_SAMPLES)
        resampled = sample_surface(target.verts, target.tris, N_SAMPLES, seed=1)
        self.noise = chamfer(self.samples, resampled) / self.diag  # sampling noise floor
        self.touch = SHELL_TOUCH * self.diag  # mm: shells this close count as one
        self.shells = touching_shells(target.verts, target.tris, self.touch)
        self.reach = HAUSDORFF_DEAD_ZONE * self.diag  # mm: ``hausdorff`` is exact beyond it
        self.tri_pts = np.asarray(target.verts, dtype=np.float64)[np.asarray(target.tris)]
        self.near = cKDTree(surface_points(target.verts, target.tris, self.reach,
                                           HAUSDORFF_MAX_SAMPLES),
                            balanced_tree=False, compact_nodes=False)  # half the build time
        self.default_frame = Frame.around(self.box, res=RES)
        self._raster = lru_cache(maxsize=8)(self._rasterize)
        self._voids = lru_cache(maxsize=8)(self._find_voids)

    def _rasterize(self, frame: Frame) -> Raster:
        return rasterize(self.target.verts, self.target.tris, frame)

    def _find_voids(self, frame: Frame) -> Voids:
        return Voids.of(self.raster(frame).occ)

    def frame_for(self, cand_box: np.ndarray) -> Frame:
        """The target's own frame when the candidate fits inside it, else the union."""
        f = self.default_frame
        if np.all(cand_box[0] >= np.asarray(f.lo)) and np.all(cand_box[1] <= np.asarray(f.hi)):
            return f
        return Frame.around(self.box, cand_box, res=RES)

    def raster(self, frame: Frame) -> Raster:
        """The target rasterised on ``frame`` (cached)."""
        return self._raster(frame)

    def voids(self, frame: Frame) -> Voids:
        """The target's labelled enclosed voids on ``frame`` (cached)."""
        return self._voids(frame)


def probe_points(cand: Mesh, samples: np.ndarray) -> np.ndarray:
    """Where ``hausdorff`` looks on the candidate: its vertices, the midpoint of each
    edge (a rod or sheet spanning a hole has its corners on the rim but its edges
    across it) and its area samples."""
    v = np.asarray(cand.verts, dtype=np.float64)
    t = np.asarray(cand.tris, dtype=np.int64)
    e = unique_edges(t, len(v))
    return np.concatenate([v[np.unique(t)], 0.5 * (v[e[:, 0]] + v[e[:, 1]]), samples])


def hausdorff_to_target(cache: TargetCache, points: np.ndarray) -> float:
    """The largest distance (mm) from ``points`` to the target's solid (``hausdorff``).

    A point inside the target (winding number > 1/2) is at 0: the faces where pieces
    built to touch meet lie inside the part. Each point's distance to the nearest of
    the target's ``surface_points`` bounds it from above; the points bounded above
    ``cache.reach`` are measured exactly (``point_mesh_distance``, ``winding_number``),
    farthest bound first, until no bound left exceeds the largest exact distance (at
    most ``HAUSDORFF_MAX_EXACT`` points; past that the next bound counts). Exact when
    above ``cache.reach``, an upper bound below it.
    """
    upper = cache.near.query(points, distance_upper_bound=cache.reach)[0]
    far = upper > cache.reach  # no surface point within reach (inf): bound them anew
    if np.any(far):
        upper[far] = cache.near.query(points[far])[0]
    out = float(upper[~far].max()) if np.any(~far) else 0.0
    order = np.flatnonzero(far)
    order = order[np.argsort(-upper[order], kind="stable")]
    for s in range(0, len(order), 256):
        if s >= HAUSDORFF_MAX_EXACT:
            return max(out, float(upper[order[s]]))
        batch = order[s:s + 256]
        if upper[batch[0]] <= out:
            break
        exact = point_mesh_distance(points[batch], cache.tri_pts, upper[batch])
        could = exact > out  # only these can raise the maximum: are they outside?
        if np.any(could):
            inside = winding_number(points[batch[could]], cache.tri_pts) > 0.5
            out = max(out, float(exact[could][~inside].max(initial=0.0)))
    return out


def feature_scores(target: Voids, cand: Voids) -> tuple[float, float]:
    """``(mean, min)`` of the per-feature scores (see the module docstring)."""
    lookup = np.zeros(cand.size, dtype=np.int64)
    lookup[cand.index] = cand.label
    at = lookup[target.index]  # the candidate's component at each target void cell
    both = at > 0
    tk, cj = target.label[both], at[both]
    pairs = np.unique(tk * (cand.n + 1) + cj)  # (target k, candidate j) overlaps
    pk, pj = pairs // (cand.n + 1), pairs % (cand.n + 1)
    inter = np.bincount(tk, minlength=target.n + 1)[1:]  # |T_k & C|
    matched = np.bincount(pk, weights=cand.sizes[pj], minlength=target.n + 1)[1:]  # |C_k|
    scores = inter / (target.sizes[1:] + matched - inter)
    stray = np.ones(cand.n + 1, dtype=bool)
    stray[0] = False
    stray[pj] = False
    n_stray = int(np.count_nonzero(stray & (cand.sizes >= SPURIOUS_MIN_CELLS)))
    if target.n + n_stray == 0:
        return 1.0, 1.0
    mean = float(scores.sum() / (target.n + n_stray))
    return mean, 0.0 if n_stray else float(scores.min())


def compare(cache: TargetCache, cand: Mesh) -> ShapeScores:
    """All components for ``cand`` against the cached target (pure numpy, host side)."""
    n_tris = int(len(cand.tris))
    if n_tris == 0 or len(cand.verts) == 0 or n_tris > TRIANGLE_BUDGET:
        # Over budget scores nothing, unmeasured: rasterising costs O(triangles x pixels)
        # of host memory (a 3-line program's 24,000-triangle comb: 13 s and 3 GiB).
        return ShapeScores(0.0, 0.0, float("inf"), 0.0, 0.0, n_tris)
    valid = is_watertight(cand.tris) and volume(cand.verts, cand.tris) > 0 \
        and n_tris <= TRIANGLE_BUDGET
    cbox = bbox(cand.verts)
    cand_samples = sample_surface(cand.verts, cand.tris, N_SAMPLES)
    raw = chamfer(cache.samples, cand_samples) / cache.diag
    d = max(0.0, raw - cache.noise)
    ch = float(np.clip(1 - (d - CHAMFER_DEAD_ZONE) / (CHAMFER_ZERO_AT - CHAMFER_DEAD_ZONE), 0, 1))
    # Extra material the other measures cannot see (module docstring, ``extra``).
    n_shells = shells(cand.tris, len(cand.verts))
    if n_shells > cache.shells:  # only then can touching pieces change the verdict
        n_shells = touching_shells(cand.verts, cand.tris, cache.touch)
    reach = float(np.max(np.maximum(cache.box[0] - cbox[0], cbox[1] - cache.box[1])))
    overhang = max(0.0, reach) / cache.diag
    extent = float(np.clip(1 - (overhang - EXTENT_DEAD_ZONE)
                           / (EXTENT_ZERO_AT - EXTENT_DEAD_ZONE), 0, 1))
    hausdorff = hausdorff_to_target(cache, probe_points(cand, cand_samples)) / cache.diag
    extent *= float(np.clip(1 - (hausdorff - HAUSDORFF_DEAD_ZONE)
                            / (HAUSDORFF_ZERO_AT - HAUSDORFF_DEAD_ZONE), 0, 1))
    extra = extent * (1.0 if n_shells <= cache.shells else cache.shells / n_shells)
    # Raster measures on the target's own frame (full resolution on the target: a far
    # speck cannot coarsen the grid until holes vanish) and, when the candidate reaches
    # outside it, also on the union frame (material outside counts); the lower wins.
    frames = [cache.default_frame]
    union = cache.frame_for(cbox)
    if union != cache.default_frame:
        frames.append(union)
    best: tuple[float, ...] | None = None
    for frame in frames:
        rt, rc = cache.raster(frame), rasterize(cand.verts, cand.tris, frame)
        voids = cache.voids(frame)
        features, features_min = feature_scores(voids, Voids.of(rc.occ))
        got = (float(iou(rt.occ, rc.occ)), silhouette_similarity(rt, rc), features,
               features_min, float(voids.n))
        best = got if best is None else tuple(min(a, b) for a, b in zip(best, got, strict=True))
        if frame is cache.default_frame:
            target_n = voids.n
    assert best is not None
    return ShapeScores(
        iou=best[0],
        chamfer=ch,
        chamfer_norm=float(d),
        silhouette=best[1],
        valid=1.0 if valid else 0.0,
        triangles=n_tris,
        features=best[2],
        features_min=best[3],
        target_features=target_n,
        extra=extra,
        extra_shells=max(0, n_shells - cache.shells),
        overhang=overhang,
        hausdorff=hausdorff,
    )


def save_mesh(mesh: Mesh, path: str) -> None:
    """Write ``mesh`` to ``path`` (format from the suffix: .stl, .obj, .ply, .glb) via trimesh.

    For inspecting a model's part; scoring itself never needs it.
    """
    import trimesh

    trimesh.Trimesh(vertices=mesh.verts, faces=mesh.tris, process=False).export(path)
