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


def _voids(solid: dsl.Solid) -> tuple[np.ndarray, float]:
    from polyrl.domains.cad.metrics import enclosed_voids

    v, t = _mesh(solid)
    frame = Frame.around(bbox(v))
    cell = float(np.prod((np.array(frame.hi) - np.array(frame.lo)) / frame.res))
    return enclosed_voids(rasterize(v, t, frame).occ), cell


def test_enclosed_voids_are_holes_and_pockets_not_open_corners() -> None:
    hole, cell = _voids(dsl.box(60, 40, 6) - dsl.cylinder(5, 10))  # through-hole along Z
    assert hole.sum() * cell == pytest.approx(np.pi * 25 * 6, rel=0.1)
    pocket, cell = _voids(dsl.box(60, 40, 6) - dsl.box(20, 10, 4).translate(0, 0, 2))
    assert pocket.sum() * cell == pytest.approx(20 * 10 * 3, rel=0.15)  # 3 of 4 mm inside
    cross, cell = _voids(dsl.cylinder(10, 40) - dsl.cylinder(2, 30).rotate(90, 0, 0))
    assert cross.sum() * cell == pytest.approx(np.pi * 4 * 20, rel=0.2)  # along Y
    # open concavities reach the edge of every slice: an L, a step, an edge notch
    assert not _voids(dsl.box(40, 10, 4) + dsl.box(4, 10, 30).translate(-18, 0, 15))[0].any()
    assert not _voids(dsl.cylinder(10, 10) + dsl.cylinder(5, 10).translate(0, 0, 10))[0].any()
    assert not _voids(dsl.box(40, 20, 5) - dsl.box(10, 10, 10).translate(20, 0, 0))[0].any()


def test_features_term_scores_each_hole() -> None:
    plate = dsl.box(100, 50, 9)
    holes = [dsl.cylinder(2, 11).translate(x, 10, 0) for x in (-30, 0, 30)]
    target = TargetCache(Mesh(*_mesh(plate - holes[0] - holes[1] - holes[2])))

    def features(solid: dsl.Solid) -> tuple[float, float, float]:
        s = compare(target, Mesh(*_mesh(solid)))
        return s.features, s.features_min, s.iou

    assert features(plate - holes[0] - holes[1] - holes[2])[:2] == (1.0, 1.0)
    f, f_min, box_iou = features(plate)  # the bounding box: global IoU cannot see the holes
    assert (f, f_min) == (0.0, 0.0) and box_iou > 0.99
    f, f_min, _ = features(plate - holes[0] - holes[1])  # one of three holes missing
    assert (f, f_min) == (pytest.approx(2 / 3), 0.0)
    f, f_min, _ = features(plate - holes[0] - holes[1] - holes[2].translate(0.5, 0, 0))
    assert 0.8 < f < 1.0 and 0.5 < f_min < 0.9  # a hole moved 0.5 mm: partial credit
    extra = dsl.cylinder(2, 11).translate(0, -10, 0)
    f, f_min, _ = features(plate - holes[0] - holes[1] - holes[2] - extra)
    assert (f, f_min) == (0.75, 0.0)  # a hole the target lacks counts as a missed feature
    # a part without voids: any void-free candidate matches, an added hole does not
    solid = TargetCache(Mesh(*_mesh(plate)))
    assert compare(solid, Mesh(*_mesh(dsl.box(90, 50, 9)))).features == 1.0
    assert compare(solid, Mesh(*_mesh(plate - extra))).features == 0.0


def test_shells_count_closed_surfaces() -> None:
    from polyrl.domains.cad.metrics import shells

    plate = dsl.box(60, 40, 6) - dsl.cylinder(5, 10)
    assert shells(*_shells_args(plate)) == 1  # a through-hole keeps one surface
    assert shells(*_shells_args(plate + dsl.box(1, 1, 1).translate(100, 0, 0))) == 2
    assert shells(*_shells_args(plate + dsl.box(0.01, 0.01, 0.01))) == 2  # inside the hole
    assert shells(*_shells_args(dsl.box(10, 10, 10) - dsl.box(2, 2, 2))) == 2  # a cavity
    v, t = _mesh(plate)
    assert shells(t, len(v) + 5) == 1  # vertices no triangle uses are not shells
    assert shells(t[:0], len(v)) == 0


def _shells_args(solid: dsl.Solid) -> tuple[np.ndarray, int]:  # (tris, n_verts)
    v, t = _mesh(solid)
    return t, len(v)


def test_extra_material_scores_and_legitimate_variants_keep_it() -> None:
    from polyrl.domains.cad.domain import CadGenDomain

    # generated parts, 3 per level: the oracle's own mesh keeps ``extra`` 1.0; a 0.01 mm
    # speck just past its corner (0.2% of the diagonal) costs half (two shells for one),
    # one 1000 mm away all of it (its box reaches diagonals out); the raster and Chamfer
    # terms stay 1.0 for both, which is why they scored 1.0 and passed before
    for task in CadGenDomain().tasks("train", n=15, seed=2):
        program = task.metadata["program"]
        v, t = dsl.mesh_arrays(dsl.build(program))
        cache = TargetCache(Mesh(v, t))
        s = compare(cache, Mesh(v.copy(), t.copy()))
        assert (s.extra, s.extra_shells, s.overhang) == (1.0, 0, 0.0), task.id
        assert s.hausdorff <= 0.02, task.id
        corner = v[np.argmax(v.sum(axis=1))] + 0.002 * cache.diag  # past a corner of the part
        for at, extra in ((corner, 0.5), ((1000, 1000, 1000), 0.0)):
            speck = dsl.build(program) + dsl.box(0.01, 0.01, 0.01).translate(*at)
            s = compare(cache, Mesh(*_mesh(speck)))
            assert (s.extra, s.extra_shells) == (extra, 1), (task.id, at, s)
            assert s.iou == s.silhouette == s.chamfer == 1.0, (task.id, at, s)
    # the same disk with its facets turned half a facet: inside the target's box
    disk = TargetCache(Mesh(*_mesh(dsl.cylinder(20, 5))))
    s = compare(disk, Mesh(*_mesh(dsl.cylinder(20, 5).rotate(0, 0, 3.75))))
    assert (s.extra, s.overhang) == (1.0, 0.0) and s.iou > 0.99 and s.hausdorff <= 0.02
    # and 0.1% larger: 0.0005 of the diagonal out, within the dead zone
    s = compare(disk, Mesh(*_mesh(dsl.cylinder(20, 5).scale(1.001))))
    assert s.extra == 1.0 and 0 < s.overhang < 0.001 and s.hausdorff <= 0.02
    # a part 10% too long: the box reaches out 5% of the diagonal, partial credit
    s = compare(disk, Mesh(*_mesh(dsl.cylinder(20, 5).scale(1.1, 1, 1))))
    assert 0.5 < s.extra < 1.0 and s.extra_shells == 0


def test_mesh_over_the_triangle_budget_is_not_measured() -> None:
    """A 3-line comb program (a block cut by 1500 thin slots, 24,000 triangles) took the
    host 13 s and 3 GiB to rasterise; over ``TRIANGLE_BUDGET`` it now scores 0 unmeasured."""
    import time

    from polyrl.domains.cad import dsl
    from polyrl.domains.cad.scoring import TRIANGLE_BUDGET, Mesh, TargetCache, compare

    target = Mesh(*dsl.mesh_arrays(dsl.box(60, 40, 8)))
    n = TRIANGLE_BUDGET // 4 + 1  # two big triangles per face, top and bottom: 4 per copy
    v = np.array([[-50, -50, 0], [50, -50, 0], [0, 50, 0]], dtype=np.float32)
    tris = np.tile(np.array([[0, 1, 2], [0, 2, 1]], dtype=np.int32), (2 * n, 1))
    start = time.perf_counter()
    s = compare(TargetCache(target), Mesh(v, tris))
    assert time.perf_counter() - start < 2.0
    assert s.iou == s.silhouette == s.valid == s.extra == s.features == 0.0


def test_pieces_that_touch_within_float_noise_are_one_shell() -> None:
    """A boss on a plate whose faces missed by 1e-9 mm were two shells: the right part
    scored 0.95 and failed on ``extra`` (IoU 1.0). Within the tolerance they are one;
    a real gap, a speck in a hole and a sealed cavity still count."""
    from polyrl.domains.cad.metrics import shells, touching_shells, triangle_distance

    plate = dsl.box(55, 35, 5).translate(0, 0, 2.5)
    for gap in (0.0, 1e-9, 1e-6, 1e-4, 0.05):
        v, t = _mesh(plate + dsl.cylinder(4, 5).translate(0, 0, 7.5 + gap))
        assert touching_shells(v, t, 0.07) == 1, gap
    v, t = _mesh(plate + dsl.cylinder(4, 5).translate(0, 0, 7.5 + 1e-6))
    assert shells(t, len(v)) == 2  # manifold3d keeps them apart
    v, t = _mesh(plate + dsl.cylinder(4, 5).translate(0, 0, 7.6))  # a 0.1 mm gap
    assert touching_shells(v, t, 0.07) == 2
    # bars crossing like a plus sign: no corner of either lies on the other (edge-edge)
    for gap, n in ((1e-6, 1), (0.1, 2)):
        v, t = _mesh(dsl.box(10, 2, 2) + dsl.box(2, 10, 2).translate(0, 0, 2 + gap))
        assert touching_shells(v, t, 0.07) == n, gap
    # side by side cylinders, tangent along a line; a chain of three transitively one
    v, t = _mesh(dsl.cylinder(5, 10) + dsl.cylinder(5, 10).translate(10 + 1e-7, 0, 0)
                 + dsl.cylinder(5, 10).translate(20 + 2e-7, 0, 0))
    assert (shells(t, len(v)), touching_shells(v, t, 0.07)) == (3, 1)
    holed = dsl.box(60, 40, 6) - dsl.cylinder(5, 10)
    for solid in (holed + dsl.box(0.01, 0.01, 0.01),  # a speck in the hole
                  holed + dsl.box(1, 1, 1).translate(100, 0, 0),
                  dsl.box(10, 10, 10) - dsl.box(2, 2, 2)):  # a cavity's wall
        v, t = _mesh(solid)
        assert touching_shells(v, t, 0.07) == 2
    # exact distances: parallel unit triangles 0.5 apart; crossed edges 0.25 apart
    a = np.array([[[0, 0, 0], [1, 0, 0], [0, 1, 0]]], dtype=float)
    assert triangle_distance(a, a + [0.1, 0.1, 0.5]) == pytest.approx([0.5])
    b = np.array([[[0.5, -1, 0.25], [0.5, 1, 0.25], [0.5, 0, 2]]], dtype=float)
    assert triangle_distance(a, b) == pytest.approx([0.25])


def test_part_written_with_rounded_numbers_keeps_full_extra() -> None:
    from polyrl.domains.cad.metrics import shells

    # plate 10/3 mm thick with a boss on it; the candidate writes 3.3333 and 1.66665
    third = 10 / 3
    plate = dsl.box(40, 30, third).translate(0, 0, third / 2)
    v, t = _mesh(plate + dsl.cylinder(5, 8).translate(0, 0, third + 4))
    assert shells(t, len(v)) == 2  # the target's own boss misses: 10/3 + 4 - 4 != 10/3
    target = TargetCache(Mesh(v, t))
    sunk = TargetCache(Mesh(*_mesh(plate + dsl.cylinder(5, 8.5).translate(0, 0, third + 3.75))))
    assert (target.shells, sunk.shells) == (1, 1)  # sunk 0.5 mm into the plate: one piece
    cand = dsl.box(40, 30, 3.3333).translate(0, 0, 1.66665) \
        + dsl.cylinder(5, 8).translate(0, 0, 3.3333 + 4 + 1e-4)
    speck = dsl.box(0.01, 0.01, 0.01).translate(18, 13, 3.8333)  # 0.5 mm above the plate
    for cache in (target, sunk):
        s = compare(cache, Mesh(*_mesh(cand)))
        assert (s.extra, s.extra_shells) == (1.0, 0), s  # against ``sunk``: was (0.5, 1)
        s = compare(cache, Mesh(*_mesh(cand + speck)))
        assert (s.extra, s.extra_shells) == (0.5, 1), s  # against ``target``: was 2/3


def test_hausdorff_is_the_farthest_distance_to_the_target_solid() -> None:
    from polyrl.domains.cad.metrics import point_triangle_distance, winding_number
    from polyrl.domains.cad.scoring import hausdorff_to_target

    plate = dsl.box(60, 40, 6) - dsl.cylinder(5, 10).translate(10, 0, 0)
    cache = TargetCache(Mesh(*_mesh(plate)))
    rng = np.random.default_rng(0)
    points = rng.uniform([-40, -30, -8], [40, 30, 8], size=(400, 3))
    brute = np.array([point_triangle_distance(p, cache.tri_pts).min() for p in points])
    inside = winding_number(points, cache.tri_pts) > 0.5
    expect = np.abs(points) <= [30, 20, 3]
    expect = expect.all(axis=1) & (np.linalg.norm(points[:, :2] - [10, 0], axis=1) > 5)
    assert np.array_equal(inside, expect)
    brute[inside] = 0.0  # inside the solid: no material the target lacks
    for p, d in zip(points, brute, strict=True):
        got = hausdorff_to_target(cache, p[None])
        if d > cache.reach:
            assert got == pytest.approx(d, abs=1e-9)
        else:  # below ``reach``: an upper bound
            assert d - 1e-9 <= got <= cache.reach
    assert hausdorff_to_target(cache, points) == pytest.approx(brute.max())


def test_junk_attached_inside_a_hole_is_far_from_the_part() -> None:
    """A 0.3 mm cube in the middle of a hole, joined to the wall by a 0.01 mm rod, is one
    shell inside the part's box: every other measure is blind to it (reward 1.0, passed
    on 48 of 48 plates); it lies a hole radius from the part's material."""
    plate = dsl.box(60, 40, 6) - dsl.cylinder(4, 10).translate(10, 0, 0)
    cache = TargetCache(Mesh(*_mesh(plate)))
    junk = dsl.box(0.3, 0.3, 0.3).translate(10, 0, 0) + dsl.box(4, 0.01, 0.01).translate(12, 0, 0)
    s = compare(cache, Mesh(*_mesh(plate + junk)))
    assert min(s.iou, s.silhouette, s.chamfer, s.features) > 0.99 and s.extra_shells == 0, s
    assert s.hausdorff == pytest.approx(4 / cache.diag, rel=0.05)  # 5.5% of the diagonal
    assert s.extra == pytest.approx(1 - (s.hausdorff - 0.02) / 0.10)
    # a rod across the hole: its corners lie on the wall, its edges' midpoints do not
    rod = dsl.box(8.2, 0.01, 0.01).translate(10, 0, 0)
    s = compare(cache, Mesh(*_mesh(plate + rod)))
    assert s.hausdorff == pytest.approx(4 / cache.diag, rel=0.05)
    # the same part built as touching pieces: their meeting faces lie inside it
    boss = dsl.box(55, 35, 5).translate(0, 0, 2.5) + dsl.cylinder(4, 5).translate(0, 0, 7.5)
    split = dsl.box(55, 35, 5).translate(0, 0, 2.5) + dsl.cylinder(4, 5).translate(0, 0, 7.5 + 1e-6)
    s = compare(TargetCache(Mesh(*_mesh(boss))), Mesh(*_mesh(split)))
    assert s.hausdorff <= 0.02 and s.extra == 1.0
