"""Shape metrics with hand-computed values (polyrl.domains.cad.metrics)."""

from __future__ import annotations

import numpy as np
import pytest

from polyrl.domains.cad import dsl
from polyrl.domains.cad.metrics import (
    Frame,
    bbox,
    chamfer,
    iou,
    is_watertight,
    rasterize,
    sample_surface,
    silhouette_similarity,
    volume,
)
from polyrl.domains.cad.scoring import Mesh, TargetCache, compare


def _mesh(solid: dsl.Solid) -> tuple[np.ndarray, np.ndarray]:
    return dsl.mesh_arrays(solid)


def test_iou_of_unit_cubes_offset_by_half_is_one_third() -> None:
    a = _mesh(dsl.box(1, 1, 1))
    b = _mesh(dsl.box(1, 1, 1).translate(0.5, 0, 0))
    frame = Frame.around(bbox(a[0]), bbox(b[0]))
    ra, rb = rasterize(*a, frame), rasterize(*b, frame)
    assert iou(ra.occ, rb.occ) == pytest.approx(1 / 3, abs=0.015)
    # views: along X both squares coincide (1.0); along Y and Z IoU 1/3 each
    assert silhouette_similarity(ra, rb) == pytest.approx((1 + 1 / 3 + 1 / 3) / 3, abs=0.015)
    # occupancy volume matches the exact volume: 1 of the 1.5 x 1 x 1 (+5% pad) frame
    cell = np.prod((np.array(frame.hi) - np.array(frame.lo)) / frame.res)
    assert ra.occ.sum() * cell == pytest.approx(1.0, rel=0.05)


def test_identical_meshes_score_perfectly() -> None:
    v, t = _mesh(dsl.cylinder(3, 10) - dsl.box(2, 2, 20))
    assert chamfer(sample_surface(v, t, 512), sample_surface(v, t, 512)) == 0.0
    s = compare(TargetCache(Mesh(v, t)), Mesh(v.copy(), t.copy()))
    assert (s.iou, s.chamfer, s.chamfer_norm, s.silhouette, s.valid) == (1.0, 1.0, 0.0, 1.0, 1.0)


def test_chamfer_of_shifted_points_and_meshes() -> None:
    assert chamfer(np.array([[0.0, 0, 0]]), np.array([[3.0, 4, 0]])) == pytest.approx(5.0)
    # A->B: (0 + 1) / 2 = 0.5; B->A: 0; symmetric mean 0.25
    assert chamfer(np.array([[0.0, 0, 0], [1, 0, 0]]), np.array([[0.0, 0, 0]])) == \
        pytest.approx(0.25)
    a = Mesh(*_mesh(dsl.box(10, 10, 10)))
    far = Mesh(*_mesh(dsl.box(10, 10, 10).translate(30, 0, 0)))
    s = compare(TargetCache(a), far)
    assert s.iou == 0.0 and s.chamfer == 0.0 and s.valid == 1.0
    assert s.silhouette == pytest.approx(1 / 3, abs=0.02)  # only the X view overlaps


def test_volume_and_watertightness() -> None:
    v, t = _mesh(dsl.box(2, 3, 4))
    assert volume(v, t) == pytest.approx(24.0)
    assert is_watertight(t)
    assert not is_watertight(t[:-1])  # a missing triangle opens the surface
    assert not is_watertight(t[:, ::-1].copy()[:6].tolist() + t[6:].tolist())  # mixed winding
    assert volume(v, t[:, ::-1]) == pytest.approx(-24.0)


def test_thin_plate_with_hole_volume_from_voxels() -> None:
    plate = dsl.box(60, 40, 2) - dsl.cylinder(5, 4)
    v, t = _mesh(plate)
    frame = Frame.around(bbox(v))
    r = rasterize(v, t, frame)
    cell = np.prod((np.array(frame.hi) - np.array(frame.lo)) / frame.res)
    assert r.occ.sum() * cell == pytest.approx(plate.m.volume(), rel=0.03)


def test_measures_agree_with_trimesh(tmp_path) -> None:
    trimesh = pytest.importorskip("trimesh")
    from polyrl.domains.cad.scoring import save_mesh

    solid = dsl.box(20, 10, 4) - dsl.cylinder(2, 8).translate(5, 0, 0) + dsl.sphere(3)
    v, t = _mesh(solid)
    tm = trimesh.Trimesh(vertices=v, faces=t, process=False)
    assert volume(v, t) == pytest.approx(tm.volume, rel=1e-6)
    assert is_watertight(t) == tm.is_watertight
    save_mesh(Mesh(v, t), str(tmp_path / "part.stl"))
    back = trimesh.load(str(tmp_path / "part.stl"))
    assert back.volume == pytest.approx(tm.volume, rel=1e-4)
