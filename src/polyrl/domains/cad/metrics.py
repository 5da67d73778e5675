"""Vectorised numpy shape metrics: ray-parity voxels, silhouettes, Chamfer, validity.

A mesh is ``verts (V, 3) float`` (mm) and ``tris (T, 3) int`` (indices, outward
winding). Both meshes of a comparison are sampled on the same ``Frame`` (a padded
box and a per-axis resolution).

Voxels: for each of the three axes, rays parallel to it go through the pixel centres
of the other two axes (slightly jittered so they never graze the edges of
axis-aligned parts); every (ray, triangle) pair within the triangle's pixel bounding
box is tested with 2D edge functions, and a sample on the ray is inside the solid
when an odd number of crossings lie below it (parity / Jordan rule). The Z rays give
the occupancy grid used for volumetric IoU; every axis gives the silhouette of an
orthographic view (a pixel is covered when its ray crosses the surface).

Enclosed voids (the part's holes, pockets and slots): for each axis, every slice of
the occupancy grid across that axis is split into 8-connected empty regions; a
region that does not reach the slice's border is enclosed by material in that
plane (a through-hole, a blind pocket seen from its floor's plane, a keyway seen
from the side). The union over the three axes is the void set. Open concavities
(an L-bracket's inside corner, a shaft's steps) reach the border of every slice
and are left to the volumetric and silhouette measures.

Chamfer: ``n`` points sampled area-uniformly on each surface (seeded, so identical
meshes give identical samples); symmetric Chamfer = mean of the two mean
nearest-neighbour distances, exact brute force in (n, n) blocks.

Shells: the closed surfaces of a mesh, i.e. the connected components of the graph of
its triangles' edges. A solid piece is one shell, a disconnected speck another, and
so is an internal cavity's wall; the vertex graph is exact for the indexed meshes
manifold3d emits (a closed surface shares its vertices along every edge).
``touching_shells`` counts shells whose surfaces come within a tolerance of each
other as one (pieces built to touch whose faces miss by float noise stay separate
surfaces in manifold3d's output): an exact triangle-to-triangle distance
(``triangle_distance``) over the triangle pairs near both shells' boxes.

Distance to a solid (``scoring.hausdorff_to_target``): nearest-point bounds from a
cKDTree over ``surface_points``, refined by exact point-to-triangle distances
(``point_mesh_distance``) and the generalised winding number (``winding_number``:
inside a closed surface is at distance 0).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import ndimage
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

_JITTER = (0.1273, 0.3519)  # fraction of a pixel; distinct and with a non-integer sum


@dataclass(frozen=True)
class Frame:
    """Sampling box: ``lo``, ``hi`` (3,) float64 mm and ``res`` samples per axis."""

    lo: tuple[float, float, float]
    hi: tuple[float, float, float]
    res: int = 64

    @staticmethod
    def around(*boxes: np.ndarray, res: int = 64, pad: float = 0.05) -> Frame:
        """The union of bounding ``boxes`` ((2, 3) lo/hi each), padded by ``pad`` per side."""
        lo = np.min([b[0] for b in boxes], axis=0)
        hi = np.max([b[1] for b in boxes], axis=0)
        ext = np.maximum(hi - lo, 1e-3 * max(float(np.max(hi - lo)), 1e-6))
        return Frame(tuple(lo - pad * ext), tuple(hi + pad * ext), res)


@dataclass(frozen=True)
class Raster:
    """Sampled shape: ``occ (res, res, res)`` bool (x, y, z) and 3 silhouettes (res, res)."""

    occ: np.ndarray
    silhouettes: tuple[np.ndarray, np.ndarray, np.ndarray]


def bbox(verts: np.ndarray) -> np.ndarray:
    """(2, 3) float64: min and max corner of ``verts``."""
    v = np.asarray(verts, dtype=np.float64)
    return np.stack([v.min(axis=0), v.max(axis=0)])


def _cast(verts: np.ndarray, tris: np.ndarray, axis: int, frame: Frame,
          want_occ: bool) -> tuple[np.ndarray | None, np.ndarray]:
    """Rays along ``axis``; returns (occupancy (res_u, res_v, res_w) or None, silhouette)."""
    u, v = [a for a in range(3) if a != axis]
    res = frame.res
    lo, hi = np.asarray(frame.lo), np.asarray(frame.hi)
    step = (hi - lo) / res
    p = np.asarray(verts, dtype=np.float64)[np.asarray(tris)]  # (T, 3 corners, 3 xyz)
    a, b, c = p[:, 0], p[:, 1], p[:, 2]
    # pixel index range of each triangle's projected bounding box
    fu = (p[:, :, u] - lo[u]) / step[u] - 0.5 - _JITTER[0]
    fv = (p[:, :, v] - lo[v]) / step[v] - 0.5 - _JITTER[1]
    i0 = np.clip(np.ceil(fu.min(1)), 0, res).astype(np.int64)
    i1 = np.clip(np.floor(fu.max(1)), -1, res - 1).astype(np.int64)
    j0 = np.clip(np.ceil(fv.min(1)), 0, res).astype(np.int64)
    j1 = np.clip(np.floor(fv.max(1)), -1, res - 1).astype(np.int64)
    nu, nv = np.maximum(i1 - i0 + 1, 0), np.maximum(j1 - j0 + 1, 0)
    counts = nu * nv
    total = int(counts.sum())
    sil = np.zeros((res, res), dtype=bool)
    occ = np.zeros((res, res, res), dtype=bool) if want_occ else None
    if total == 0:
        return occ, sil
    t = np.repeat(np.arange(len(counts)), counts)  # (P,) triangle of each pair
    local = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
    ii = i0[t] + local // nv[t]
    jj = j0[t] + local % nv[t]
    x = lo[u] + (ii + 0.5 + _JITTER[0]) * step[u]
    y = lo[v] + (jj + 0.5 + _JITTER[1]) * step[v]
    ax, ay, bx, by, cx, cy = a[t, u], a[t, v], b[t, u], b[t, v], c[t, u], c[t, v]
    w0 = (bx - x) * (cy - y) - (by - y) * (cx - x)  # (P,) edge functions
    w1 = (cx - x) * (ay - y) - (cy - y) * (ax - x)
    w2 = (ax - x) * (by - y) - (ay - y) * (bx - x)
    area = w0 + w1 + w2
    inside = (area != 0) & (
        ((w0 >= 0) & (w1 >= 0) & (w2 >= 0)) | ((w0 <= 0) & (w1 <= 0) & (w2 <= 0)))
    ii, jj, t = ii[inside], jj[inside], t[inside]
    sil[ii, jj] = True
    if occ is not None and len(t):
        z = (w0[inside] * a[t, axis] + w1[inside] * b[t, axis] + w2[inside] * c[t, axis])
        z = z / area[inside]
        centres = lo[axis] + (np.arange(res) + 0.5) * step[axis]
        k = np.searchsorted(centres, z, side="right")  # first sample above the crossing
        starts = np.bincount((ii * res + jj) * (res + 1) + k, minlength=res * res * (res + 1))
        parity = np.cumsum(starts.reshape(res, res, res + 1)[:, :, :res], axis=2) & 1
        occ = parity.astype(bool)
    return occ, sil


def rasterize(verts: np.ndarray, tris: np.ndarray, frame: Frame) -> Raster:
    """Occupancy (from Z rays) and the silhouettes seen along X, Y and Z."""
    sx = _cast(verts, tris, 0, frame, False)[1]
    sy = _cast(verts, tris, 1, frame, False)[1]
    occ, sz = _cast(verts, tris, 2, frame, True)
    assert occ is not None
    return Raster(occ, (sx, sy, sz))


def iou(a: np.ndarray, b: np.ndarray) -> float:
    """Intersection over union of two boolean arrays; 1.0 when both are empty."""
    union = np.count_nonzero(a | b)
    return 1.0 if union == 0 else np.count_nonzero(a & b) / union


def enclosed_voids(occ: np.ndarray) -> np.ndarray:
    """Bool array like ``occ``: empty cells enclosed by material within a slice along any axis.

    See the module docstring. Only the occupied bounding range (plus one empty layer)
    is labelled; cells outside it are never enclosed.
    """
    out = np.zeros(occ.shape, dtype=bool)
    filled = np.nonzero(occ.any(axis=(1, 2)))[0], np.nonzero(occ.any(axis=(0, 2)))[0], \
        np.nonzero(occ.any(axis=(0, 1)))[0]
    if any(len(f) == 0 for f in filled):
        return out
    crop = tuple(slice(max(int(f[0]) - 1, 0), int(f[-1]) + 2) for f in filled)
    empty = ~occ[crop]
    voids = np.zeros(empty.shape, dtype=bool)
    structure = np.zeros((3, 3, 3), dtype=bool)
    structure[1] = True  # 8-connected within a slice (axis 0 after the move), never across
    for axis in range(3):
        sliced = np.ascontiguousarray(np.moveaxis(empty, axis, 0))  # contiguous slices: faster
        labels, n = ndimage.label(sliced, structure=structure)
        outside = np.zeros(n + 1, dtype=bool)
        outside[0] = True  # label 0: material
        for edge in (labels[:, 0], labels[:, -1], labels[:, :, 0], labels[:, :, -1]):
            outside[edge] = True
        voids |= np.moveaxis(~outside[labels], 0, axis)
    out[crop] = voids
    return out


def silhouette_similarity(a: Raster, b: Raster) -> float:
    """Mean 2D IoU of the three orthographic silhouettes."""
    return float(np.mean([iou(x, y) for x, y in zip(a.silhouettes, b.silhouettes, strict=True)]))


def sample_surface(verts: np.ndarray, tris: np.ndarray, n: int, seed: int = 0) -> np.ndarray:
    """(n, 3) float64 points drawn area-uniformly on the surface (seeded)."""
    p = np.asarray(verts, dtype=np.float64)[np.asarray(tris)]
    area = 0.5 * np.linalg.norm(np.cross(p[:, 1] - p[:, 0], p[:, 2] - p[:, 0]), axis=1)
    rng = np.random.default_rng(seed)
    idx = rng.choice(len(p), size=n, p=area / area.sum())
    r1, r2 = rng.random(n), rng.random(n)
    s = np.sqrt(r1)
    w = np.stack([1 - s, s * (1 - r2), s * r2], axis=1)  # (n, 3) barycentric
    return np.einsum("nk,nkd->nd", w, p[idx])


def chamfer(pa: np.ndarray, pb: np.ndarray, block: int = 2048) -> float:
    """Symmetric Chamfer distance (mm) of point sets (n, 3) and (m, 3).

    One (block, m) float32 squared-distance matrix per block of ``pa``, built axis by
    axis with outer differences (no BLAS, which thrashes on a loaded 2-core host),
    gives both nearest-neighbour directions.
    """
    a = np.asarray(pa, dtype=np.float32)
    b = np.asarray(pb, dtype=np.float32)
    a_best = []
    b_best = np.full(len(b), np.inf, dtype=np.float32)
    for s in range(0, len(a), block):
        ab = a[s:s + block]
        d2 = np.zeros((len(ab), len(b)), dtype=np.float32)  # (block, m)
        for k in range(3):
            diff = np.subtract.outer(ab[:, k], b[:, k])
            d2 += diff * diff
        a_best.append(d2.min(axis=1))
        np.minimum(b_best, d2.min(axis=0), out=b_best)
    da = np.sqrt(np.concatenate(a_best).astype(np.float64))
    db = np.sqrt(b_best.astype(np.float64))
    return 0.5 * (float(da.mean()) + float(db.mean()))


def is_watertight(tris: np.ndarray) -> bool:
    """True when every directed edge appears once and its reverse once (closed, oriented)."""
    t = np.asarray(tris, dtype=np.int64)
    if len(t) == 0:
        return False
    e = np.concatenate([t[:, [0, 1]], t[:, [1, 2]], t[:, [2, 0]]])  # (3T, 2) directed
    n = int(t.max()) + 1
    fwd = e[:, 0] * n + e[:, 1]
    rev = e[:, 1] * n + e[:, 0]
    fwd_sorted = np.sort(fwd)
    if len(np.unique(fwd_sorted)) != len(fwd_sorted):
        return False
    return bool(np.array_equal(fwd_sorted, np.sort(rev)))


def volume(verts: np.ndarray, tris: np.ndarray) -> float:
    """Signed volume (mm^3) by the divergence theorem; positive for outward winding."""
    p = np.asarray(verts, dtype=np.float64)[np.asarray(tris)]
    return float(np.einsum("ij,ij->i", p[:, 0], np.cross(p[:, 1], p[:, 2])).sum() / 6.0)


def shells(tris: np.ndarray, n_verts: int) -> int:
    """Connected components of the triangles (edge-connected; see the module docstring).

    Vertices no triangle uses are not counted.
    """
    return shell_labels(tris, n_verts)[1]


def _dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.einsum("...k,...k->...", a, b)


def point_segment_distance(p: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(...,) distances from points ``p`` to segments ``a``-``b`` (all (..., 3), broadcast)."""
    ab = b - a
    den = _dot(ab, ab)
    t = np.clip(_dot(p - a, ab) / np.where(den > 0, den, 1.0), 0.0, 1.0)
    return np.linalg.norm(p - (a + t[..., None] * ab), axis=-1)


def point_triangle_distance(p: np.ndarray, tri: np.ndarray) -> np.ndarray:
    """(...,) distances from points ``p`` (..., 3) to triangles ``tri`` (..., 3, 3), broadcast.

    The plane distance where ``p`` projects inside the triangle, else the nearest of
    its three edges (a degenerate triangle is its edges).
    """
    a, b, c = tri[..., 0, :], tri[..., 1, :], tri[..., 2, :]
    n = np.cross(b - a, c - a)
    nn = _dot(n, n)
    ok = nn > 0
    inside = ok
    for u, v in ((a, b), (b, c), (c, a)):  # p on the inner side of every edge
        inside = inside & (_dot(np.cross(v - u, p - u), n) >= 0)
    plane = np.abs(_dot(p - a, n)) / np.sqrt(np.where(ok, nn, 1.0))
    edges = np.minimum(np.minimum(point_segment_distance(p, a, b),
                                  point_segment_distance(p, b, c)),
                       point_segment_distance(p, c, a))
    return np.where(inside, plane, edges)


def segment_segment_distance(p1: np.ndarray, q1: np.ndarray, p2: np.ndarray,
                             q2: np.ndarray) -> np.ndarray:
    """(...,) distances between segments ``p1``-``q1`` and ``p2``-``q2`` ((..., 3) each).

    Closest points by clamped parameters (Ericson, *Real-Time Collision Detection* 5.1.9),
    zero-length segments included.
    """
    d1, d2, r = q1 - p1, q2 - p2, p1 - p2
    a, e, f = _dot(d1, d1), _dot(d2, d2), _dot(d2, r)
    c, b = _dot(d1, r), _dot(d1, d2)
    safe_a, safe_e = np.where(a > 0, a, 1.0), np.where(e > 0, e, 1.0)
    den = a * e - b * b
    s = np.where(den > 1e-12 * a * e, np.clip((b * f - c * e) / np.where(den > 0, den, 1.0),
                                              0.0, 1.0), 0.0)
    t = (b * s + f) / safe_e
    s = np.where(t < 0, np.clip(-c / safe_a, 0.0, 1.0),
                 np.where(t > 1, np.clip((b - c) / safe_a, 0.0, 1.0), s))
    t = np.clip(t, 0.0, 1.0)
    s = np.where(a > 0, s, 0.0)
    t = np.where(e > 0, np.where(a > 0, t, np.clip(f / safe_e, 0.0, 1.0)), 0.0)
    return np.linalg.norm((p1 + s[..., None] * d1) - (p2 + t[..., None] * d2), axis=-1)


def triangle_distance(ta: np.ndarray, tb: np.ndarray) -> np.ndarray:
    """(P,) distances between triangles ``ta[i]`` and ``tb[i]`` ((P, 3, 3) each).

    The least of the six vertex-triangle and nine edge-edge distances: exact for
    triangles that do not cross (two crossing ones give the gap an edge pierces, not 0).
    """
    best = np.minimum(point_triangle_distance(ta, tb[:, None]).min(axis=1),
                      point_triangle_distance(tb, ta[:, None]).min(axis=1))
    ea, eb = np.roll(ta, -1, axis=1), np.roll(tb, -1, axis=1)  # edge i: corner i to i + 1
    edges = segment_segment_distance(ta[:, :, None], ea[:, :, None], tb[:, None], eb[:, None])
    return np.minimum(best, edges.reshape(len(ta), 9).min(axis=1))


def shell_labels(tris: np.ndarray, n_verts: int) -> tuple[np.ndarray, int]:
    """``(label (T,) int of each triangle's shell, 0..n-1; n shells)`` (see ``shells``)."""
    t = np.asarray(tris, dtype=np.int64)
    if len(t) == 0:
        return np.zeros(0, dtype=np.int64), 0
    rows = np.concatenate([t[:, 0], t[:, 1]])
    cols = np.concatenate([t[:, 1], t[:, 2]])  # two edges per triangle connect all three
    graph = coo_matrix((np.ones(len(rows), dtype=np.int8), (rows, cols)), shape=(n_verts, n_verts))
    _, vert_label = connected_components(graph, directed=False)
    used, label = np.unique(vert_label[t[:, 0]], return_inverse=True)
    return label.reshape(-1).astype(np.int64), int(len(used))


TOUCH_MAX_SHELLS = 64
TOUCH_MAX_PAIRS = 250_000
_TOUCH_CHUNK = 16_384


def _boxes_meet(lo_a: np.ndarray, hi_a: np.ndarray, lo_b: np.ndarray, hi_b: np.ndarray,
                tol: float) -> np.ndarray:
    """(A, B) bool: box a and box b ((A, 3), (B, 3) corners) come within ``tol`` per axis."""
    return np.all((lo_a[:, None] <= hi_b[None] + tol) & (lo_b[None] <= hi_a[:, None] + tol),
                  axis=2)


def touching_shells(verts: np.ndarray, tris: np.ndarray, tol: float) -> int:
    """Shells (``shells``), counting those whose surfaces come within ``tol`` mm as one.

    Two pieces built to touch (a boss standing on a plate, shaft sections end to end)
    stay separate surfaces when their faces miss by float noise (a height written
    3.3333 for 10/3): they are one part. For each pair of shells whose boxes come
    within ``tol`` (and are not joined yet), the triangles of each inside the other's
    box are paired where their own boxes come within ``tol`` and measured
    (``triangle_distance``); pieces that touch are joined transitively. Exact for the
    non-crossing shells manifold3d emits (overlapping pieces are one shell after a
    union). Over ``TOUCH_MAX_SHELLS`` shells the raw count is returned, and after
    ``TOUCH_MAX_PAIRS`` triangle pairs (about a second) no more pieces are joined: a
    part of the language's kind has a few shells and needs a few thousand pairs.
    """
    label, n = shell_labels(tris, len(verts))
    if n <= 1 or n > TOUCH_MAX_SHELLS:
        return n
    p = np.asarray(verts, dtype=np.float64)[np.asarray(tris, dtype=np.int64)]  # (T, 3, 3)
    lo, hi = p.min(axis=1), p.max(axis=1)
    slo = np.full((n, 3), np.inf)
    shi = np.full((n, 3), -np.inf)
    np.minimum.at(slo, label, lo)
    np.maximum.at(shi, label, hi)
    near = np.triu(_boxes_meet(slo, shi, slo, shi, tol), k=1)
    if not near.any():
        return n
    order = np.argsort(label, kind="stable")
    members = np.split(order, np.cumsum(np.bincount(label, minlength=n))[:-1])
    parent = list(range(n))
    budget = TOUCH_MAX_PAIRS

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for a, b in np.argwhere(near).tolist():
        if root(a) == root(b):
            continue
        rlo = np.maximum(slo[a], slo[b])[None]  # where both boxes (within tol) overlap
        rhi = np.minimum(shi[a], shi[b])[None]
        ta = members[a][_boxes_meet(lo[members[a]], hi[members[a]], rlo, rhi, tol)[:, 0]]
        tb = members[b][_boxes_meet(lo[members[b]], hi[members[b]], rlo, rhi, tol)[:, 0]]
        rows = max(1, _TOUCH_CHUNK // max(len(tb), 1))
        for s in range(0, len(ta), rows):
            ia, ib = np.nonzero(_boxes_meet(lo[ta[s:s + rows]], hi[ta[s:s + rows]],
                                            lo[tb], hi[tb], tol))
            budget -= len(ia)
            if budget < 0:
                return len({root(i) for i in range(n)})
            if len(ia) and np.any(triangle_distance(p[ta[s + ia]], p[tb[ib]]) <= tol):
                parent[root(a)] = root(b)
                break
    return len({root(i) for i in range(n)})


def unique_edges(tris: np.ndarray, n_verts: int) -> np.ndarray:
    """(E, 2) int64: each undirected edge of the triangles once, lower index first."""
    t = np.asarray(tris, dtype=np.int64)
    e = np.concatenate([t[:, [0, 1]], t[:, [1, 2]], t[:, [2, 0]]])
    key = np.unique(e.min(axis=1) * n_verts + e.max(axis=1))
    return np.stack([key // n_verts, key % n_verts], axis=1)


def surface_points(verts: np.ndarray, tris: np.ndarray, spacing: float, max_samples: int,
                   seed: int = 0) -> np.ndarray:
    """(n, 3) float64 points on the surface, for nearest-point upper bounds of distance.

    Every vertex; points along every edge at most ``spacing`` apart (another
    triangulation of the same solid puts its vertices on these edges: each is within
    ``spacing / 2`` of one); and ``2 * area / spacing**2`` area-uniform samples (at
    most ``max_samples``), so a point of a face is farther than ``spacing`` from all of
    them with probability about exp(-2 pi) = 0.2%.
    """
    v = np.asarray(verts, dtype=np.float64)
    t = np.asarray(tris, dtype=np.int64)
    e = unique_edges(t, len(v))
    a, b = v[e[:, 0]], v[e[:, 1]]
    k = np.maximum(np.ceil(np.linalg.norm(b - a, axis=1) / spacing).astype(np.int64), 1)
    edge = np.repeat(np.arange(len(e)), k - 1)  # interior points of each edge
    frac = (np.arange(len(edge)) - np.repeat(np.cumsum(k - 1) - (k - 1), k - 1) + 1) / k[edge]
    along = a[edge] + frac[:, None] * (b[edge] - a[edge])
    p = v[t]
    area = 0.5 * np.linalg.norm(np.cross(p[:, 1] - p[:, 0], p[:, 2] - p[:, 0]), axis=1).sum()
    n = int(min(max_samples, np.ceil(2 * area / spacing**2)))
    parts = [v[np.unique(t)], along]
    if n > 0 and area > 0:
        parts.append(sample_surface(v, t, n, seed=seed))
    return np.concatenate(parts)


def point_mesh_distance(points: np.ndarray, tri_pts: np.ndarray, upper: np.ndarray,
                        block: int = 262_144) -> np.ndarray:
    """(n,) exact distances from ``points`` (n, 3) to the triangles ``tri_pts`` (T, 3, 3).

    ``upper`` (n,) bounds each distance from above (the nearest known surface point):
    a triangle whose bounding sphere lies farther than that is skipped.
    """
    q = np.asarray(points, dtype=np.float64)
    centre = tri_pts.mean(axis=1)
    radius = np.linalg.norm(tri_pts - centre[:, None], axis=2).max(axis=1)
    out = np.asarray(upper, dtype=np.float64).copy()
    rows = max(1, block // max(len(tri_pts), 1))
    for s in range(0, len(q), rows):
        qs = q[s:s + rows]
        near = np.linalg.norm(qs[:, None] - centre[None], axis=2) - radius <= out[s:s + rows, None]
        ii, jj = np.nonzero(near)
        if len(ii):
            np.minimum.at(out, s + ii, point_triangle_distance(qs[ii], tri_pts[jj]))
    return out


def winding_number(points: np.ndarray, tri_pts: np.ndarray, block: int = 262_144) -> np.ndarray:
    """(n,) generalised winding number of ``points`` (n, 3) in the closed surface ``tri_pts``.

    The triangles' signed solid angles summed over 4 pi (Van Oosterom and Strackee):
    1 inside an outward-wound closed surface, 0 outside, 0.5 on it.
    """
    q = np.asarray(points, dtype=np.float64)
    out = np.zeros(len(q))
    rows = max(1, block // max(len(tri_pts), 1))
    for s in range(0, len(q), rows):
        r = tri_pts[None] - q[s:s + rows, None, None]  # (rows, T, 3 corners, 3)
        a, b, c = r[:, :, 0], r[:, :, 1], r[:, :, 2]
        la, lb, lc = (np.linalg.norm(x, axis=-1) for x in (a, b, c))
        det = _dot(a, np.cross(b, c))
        den = la * lb * lc + _dot(a, b) * lc + _dot(b, c) * la + _dot(c, a) * lb
        out[s:s + rows] = 2 * np.arctan2(det, den).sum(axis=1) / (4 * np.pi)
    return out
