"""cad/gen-v1 end to end: programs run in the sandbox ForkServer, scored on the host."""

from __future__ import annotations

import numpy as np
import pytest

from polyrl.domains.cad.domain import CadGenDomain
from polyrl.domains.cad.runner import decode_mesh
from polyrl.domains.checker import check_domain
from polyrl.errors import SandboxError
from polyrl.types import ExecResult


@pytest.fixture(scope="module")
def domain() -> CadGenDomain:
    return CadGenDomain()


def test_check_domain_passes(domain: CadGenDomain) -> None:
    report = check_domain(domain, n=5)
    assert report.ok, report.problems


def test_every_difficulty_oracle_scores_one(domain: CadGenDomain) -> None:
    for level in range(1, 6):
        for task in domain.tasks("train", difficulty=level, n=2, seed=11):
            score = domain.score(task, domain.oracle(task))
            assert score.reward == 1.0 and score.passed, (task.id, score)


def test_close_but_wrong_part_gets_partial_credit(domain: CadGenDomain) -> None:
    task = next(domain.tasks("train", difficulty=2, n=1, seed=5))
    program = task.metadata["program"]
    # drop the last operation: the base shape without its hole or boss
    first = program.splitlines()[0]
    base = first if first.startswith("result") else first.replace("base =", "result =")
    score = domain.score(task, f"```python\n{base}\n```")
    assert 0.5 < score.reward < 1.0
    assert score.components["valid"] == 1.0 and score.components["iou"] > 0.5
    assert score.passed is False


def test_failing_or_forbidden_programs_score_zero(domain: CadGenDomain) -> None:
    task = next(domain.tasks("train", difficulty=1, n=1))
    crash = domain.score(task, "result = box(1, 1, 0)")  # raises inside the sandbox
    assert crash.reward == 0.0 and crash.components["in_subset"] == 1.0
    assert crash.components["ran"] == 0.0
    forbidden = domain.score(task, "import os\nresult = box(1, 1, 1)")
    assert forbidden.reward == 0.0 and forbidden.components["in_subset"] == 0.0


class _BrokenSandbox:
    def run_python(self, code: str, stdin: object = None, files: object = None) -> ExecResult:
        return ExecResult(argv=["python"], error="SandboxError", error_message="bwrap died")


def test_sandbox_failure_raises_not_zero() -> None:
    domain = CadGenDomain(server=_BrokenSandbox())
    task = next(domain.tasks("train", difficulty=1, n=1))
    with pytest.raises(SandboxError):
        domain.score(task, domain.oracle(task))
    assert domain.safe_score(task, domain.oracle(task)).error == "SandboxError"


def test_decode_rejects_bad_payloads() -> None:
    with pytest.raises(ValueError):
        decode_mesh("not base64 !!")


def test_same_part_built_differently_passes(domain: CadGenDomain) -> None:
    task = next(t for t in domain.tasks("train", difficulty=3, n=20, seed=3)
                if t.metadata["program"].startswith("result = box"))
    lines = task.metadata["program"].splitlines()
    holes = [ln.split(" - ", 1)[1] for ln in lines[1:]]
    # all holes united first, in reverse order: a different triangulation of the same solid
    alt = f"holes = {' + '.join(holes[::-1])}\nresult = {lines[0].split('= ', 1)[1]} - holes\n"
    score = domain.score(task, alt)
    assert score.passed and score.reward > 0.99, score
    assert score.components["iou"] == pytest.approx(1.0, abs=0.01)
    assert score.components["extra"] == 1.0 and score.components["overhang"] == 0.0


def _bounding_box_program(task) -> str:
    from polyrl.domains.cad import dsl

    verts, _ = dsl.mesh_arrays(dsl.build(task.metadata["program"]))
    lo, hi = verts.min(0), verts.max(0)
    (sx, sy, sz), (cx, cy, cz) = hi - lo, (hi + lo) / 2
    return f"result = box({sx:g}, {sy:g}, {sz:g}).translate({cx:g}, {cy:g}, {cz:g})"


def test_plain_box_does_not_pass_as_plate_with_hole(domain: CadGenDomain) -> None:
    # cad-gen-s0-d2-4: plate 100 x 50 x 9 with one 4 mm hole; the global measures of its
    # bounding box are all > 0.99, so only the feature term tells them apart
    task = next(t for t in domain.tasks("test", difficulty=2, n=12) if t.id == "cad-gen-s0-d2-4")
    box = domain.score(task, _bounding_box_program(task))
    assert box.passed is False and box.reward < 0.75, box  # was passed, reward 0.999
    assert box.components["iou"] > 0.99 and box.components["silhouette"] > 0.99
    assert box.components["features"] == 0.0 and box.components["target_features"] == 1.0
    oracle = domain.score(task, domain.oracle(task))
    assert oracle.passed and oracle.reward == 1.0 and oracle.components["features"] == 1.0


def test_bounding_box_or_filled_part_fails_whenever_the_target_has_holes(
        domain: CadGenDomain) -> None:
    seen = 0
    for level in (2, 3, 4, 5):
        for task in domain.tasks("train", difficulty=level, n=3, seed=7):
            program = task.metadata["program"]
            if "hole" not in task.metadata["description"]:
                continue  # boss or plain shaft: nothing enclosed to miss
            seen += 1
            oracle = domain.score(task, domain.oracle(task))
            # the part without its holes: everything up to the first cut
            lines = program.splitlines()
            cut = next(i for i, ln in enumerate(lines) if " - " in ln or ln.startswith("for "))
            solid = lines[cut].split(" = ", 1)[1].split(" - ")[0] if " - " in lines[cut] \
                else "result"
            filled = "\n".join(lines[:cut] + [f"result = {solid}"])
            for wrong in (_bounding_box_program(task), filled):
                score = domain.score(task, wrong)
                assert score.passed is False, (task.id, wrong, score)
                assert score.reward <= oracle.reward - 0.25, (task.id, wrong, score)
                assert score.components["features"] == 0.0, (task.id, wrong, score)
    assert seen >= 6


def test_near_miss_holes_keep_partial_credit(domain: CadGenDomain) -> None:
    task = next(t for t in domain.tasks("train", difficulty=3, n=20, seed=3)
                if t.metadata["program"].startswith("result = box"))
    lines = task.metadata["program"].splitlines()
    assert len(lines) >= 3  # a plate and at least two holes
    moved = "\n".join(lines[:-1] + [lines[-1] + ".translate(0.5, 0, 0)"])
    score = domain.score(task, moved)
    assert score.passed and 0.9 < score.reward < 1.0, score
    assert 0.5 < score.components["features"] < 1.0
    missing = "\n".join(lines[:-1])  # one hole left out
    score = domain.score(task, missing)
    k = score.components["target_features"]
    assert score.components["features"] == pytest.approx((k - 1) / k, abs=1e-9)
    assert score.passed is False and 0.8 < score.reward < 1.0, score


def test_far_speck_does_not_coarsen_the_grid_until_holes_vanish(domain: CadGenDomain) -> None:
    # a 0.01 mm cube far away stretched the union raster frame: the target's holes fell
    # between rays, and the bounding box + speck scored 1.0, passed (d2-4, d3-10)
    tasks = {t.id: t for lv in (2, 3) for t in domain.tasks("test", difficulty=lv, n=12)}
    for tid in ("cad-gen-s0-d2-4", "cad-gen-s0-d3-10"):
        task = tasks[tid]
        for far in (1000, 100000):
            speck = f"\nresult = result + box(0.01, 0.01, 0.01).translate({far}, {far}, {far})"
            score = domain.score(task, _bounding_box_program(task) + speck)
            assert score.passed is False and score.reward < 0.75, (tid, far, score)
            assert score.components["features"] == 0.0
        oracle = domain.score(task, domain.oracle(task))
        assert oracle.passed and oracle.reward == 1.0


def test_extra_material_anywhere_costs_reward_and_fails(domain: CadGenDomain) -> None:
    # the oracle's part plus a 0.01 mm cube scored 1.0 and passed wherever the cube was:
    # Chamfer samples never land on it, the target-frame raster clips it, the union
    # frame's rays miss it; outside the part's box, at its corner or in a hole
    from polyrl.domains.cad import dsl

    tasks = {t.id: t for lv in (2, 3) for t in domain.tasks("test", difficulty=lv, n=12)}
    speck = "result = result + box(0.01, 0.01, 0.01).translate({}, {}, {})\n"
    for tid in ("cad-gen-s0-d2-4", "cad-gen-s0-d3-10"):
        task = tasks[tid]
        program = task.metadata["program"]
        oracle = domain.score(task, domain.oracle(task))
        assert oracle.passed and oracle.reward == 1.0, (tid, oracle)
        far = domain.score(task, program + speck.format(1000, 1000, 1000))
        assert far.passed is False and far.reward == pytest.approx(0.9), (tid, far)
        c = oracle.components
        assert (c["extra"], c["extra_shells"], c["overhang"]) == (1.0, 0.0, 0.0)
        c = far.components
        assert (c["extra"], c["extra_shells"]) == (0.0, 1.0) and c["overhang"] > 5
        assert c["iou"] == c["silhouette"] == c["chamfer"] == c["features"] == 1.0

        hi = dsl.mesh_arrays(dsl.build(program))[0].max(0)
        hole = program.splitlines()[1].rsplit(".translate(", 1)[1].rstrip(")").split(", ")
        for near in (speck.format(*(hi + 0.5)), speck.format(*hole)):  # corner; in a hole
            score = domain.score(task, program + near)
            c = score.components
            assert score.passed is False and c["extra_shells"] == 1 and c["overhang"] < 0.01
            # half for the extra shell, and less where the speck lies > 2% of the
            # diagonal from the part (``hausdorff``: the hole's radius, 1.8% and 4.0%)
            reach = min(1.0, 1 - (c["hausdorff"] - 0.02) / 0.10)
            assert c["extra"] == pytest.approx(0.5 * reach), (tid, score)
            assert score.reward == pytest.approx(0.9 + 0.05 * reach), (tid, score)


def test_program_cannot_reach_builtins_or_print_its_own_mesh(domain: CadGenDomain) -> None:
    """``sin = chr; cos = exec`` passed the subset check and ran any code in the prelude's
    scope, which printed a 3000-triangle mesh (325 bytes) that took the host 15 s and
    1.9 GiB to score; now refused, and the runner builds in the language's scope."""
    import numpy as np

    from polyrl.domains.cad import dsl
    from polyrl.domains.cad.runner import run_program

    task = next(domain.tasks("train", difficulty=2, n=1))
    code = "print(encode_mesh(*mesh_arrays(box(1, 1, 1))))\n"
    prog = "sin = chr\ncos = exec\ncos(" + " + ".join(f"sin({ord(c)})" for c in code) + \
        ")\nemit = id\nresult = box(1, 1, 1)\n"
    s = domain.score(task, prog)
    assert s.reward == 0.0 and s.components["in_subset"] == 0.0
    out = run_program("f = print\nf(1)\nresult = box(1, 1, 1)\n")  # the sandbox alone
    assert out.mesh is None and "print" in out.failure
    with pytest.raises(ValueError):
        decode_mesh(dsl.encode_mesh(np.zeros((3, 3), np.float32),
                                    np.zeros((dsl.MAX_EMIT_TRIANGLES + 1, 3), np.int32))[
            len(dsl.MESH_TAG):])


def test_pieces_touching_within_float_noise_score_as_one_part(domain: CadGenDomain) -> None:
    """The oracle with its boss (or a shaft section) moved up 1e-9..1e-3 mm scored 0.95 and
    failed: the pieces stay separate surfaces in manifold3d's mesh (IoU 1.0, extra 0.5)."""
    import re

    bosses = [t for t in domain.tasks("train", difficulty=2, n=40) if "boss" in t.metadata["program"]]
    shafts = [t for t in domain.tasks("train", difficulty=3, n=40) if "s0 =" in t.metadata["program"]]
    cases = [(bosses[0], r"(boss = cylinder\([^)]*\)\.translate\(0, 0, [^)]*)\)"),
             (shafts[0], r"(s2 = cylinder\([^)]*\)\.translate\(0, 0, [^)]*)\)")]
    for task, pattern in cases:
        program = task.metadata["program"]
        for gap in (1e-9, 1e-4, 1e-3, 1.0):
            moved = re.sub(pattern, lambda m, g=gap: f"{m.group(1)} + {g})", program)
            assert moved != program
            score = domain.score(task, moved)
            c = score.components
            if gap < 1:
                assert score.passed and score.reward == pytest.approx(1.0, abs=1e-3), (gap, score)
                assert (c["extra"], c["extra_shells"]) == (1.0, 0.0)
            else:  # a real 1 mm gap: two pieces (and the box reaches 1 mm higher)
                assert not score.passed and c["extra"] < 0.5 and c["extra_shells"] == 1, score


def test_junk_attached_in_a_hole_does_not_pass(domain: CadGenDomain) -> None:
    """The oracle plus a 0.3 mm cube in the middle of a hole, joined to its wall by a
    0.01 mm rod (one shell, inside the box) scored 1.0 and passed on 48 of 48 plates."""
    import re

    from polyrl.domains.cad import dsl

    seen = 0
    for task in domain.tasks("train", difficulty=[2, 3], n=24):
        program = task.metadata["program"]
        m = re.search(r"cylinder\(([\d.]+), [\d.]+\)\.translate\(([-\d.]+), ([-\d.]+), 0\)", program)
        if not m:
            continue
        r, a, b = map(float, m.groups())
        v = dsl.mesh_arrays(dsl.build(program))[0]
        if r < 0.025 * np.linalg.norm(v.max(0) - v.min(0)):
            continue  # a hole within 2.5% of the diagonal: junk there is within the gate
        seen += 1
        junk = (f"result = result + box(0.3, 0.3, 0.3).translate({a}, {b}, 0)"
                f" + box({r}, 0.01, 0.01).translate({a + r / 2}, {b}, 0)\n")
        score = domain.score(task, program + junk)
        c = score.components
        assert score.passed is False and c["hausdorff"] > 0.02, (task.id, score)
        assert c["extra_shells"] == 0 and c["iou"] == c["features"] == 1.0
        assert score.reward < 1.0
    assert seen >= 3


def test_a_speck_or_a_flattened_part_earns_no_absence_terms(domain: CadGenDomain) -> None:
    """``features`` and ``extra`` measure absences (no wrong hole, no extra material): a
    0.001 mm cube at the origin had them too and scored 0.5 on every part without holes
    (0.32 on average over 200 parts); the oracle squashed flat (volume 0) scored 0.32.
    They now pay in proportion to the IoU below 0.5; the oracle still scores 1."""
    for level in range(1, 6):
        for task in domain.tasks("test", difficulty=level, n=2, seed=3):
            speck = domain.score(task, "result = box(0.001, 0.001, 0.001)")
            assert speck.reward <= 0.1 + 1e-9, (task.id, speck)
            flat = domain.score(task, domain.oracle(task).rstrip("`\n")
                                + "\nresult = result.scale(1, 1, 0)\n```")
            assert flat.reward <= 0.2, (task.id, flat)  # its Chamfer, one silhouette
            assert domain.score(task, domain.oracle(task)).reward == 1.0
