"""Seeded generator of mechanical parts: a description in words and the generating program.

Difficulty is the number of solid operations (primitives placed + booleans):

1. one block or disk (a primitive, possibly moved);
2. a plate with one through-hole, or a block with a boss on top;
3. a plate with 2-4 holes, or a stepped shaft of three sections;
4. a flange: disk + hub, a centre bore and a bolt circle of 4-6 holes;
5. an L-bracket: base and upright plates, holes in both (the upright's holes are
   rotated cylinders), and a triangular gusset cut by an intersection, or a stepped
   shaft with a keyway and a cross hole.

The program is the oracle; its mesh (built on the host by ``dsl.build``) is the target.
"""

from __future__ import annotations

import random

Part = tuple[str, str]
"""(description, program)."""


def _f(x: float) -> str:
    """Compact number text: 12 -> '12', 2.5 -> '2.5'."""
    return f"{x:g}"


def _block(rng: random.Random) -> Part:
    x, y, z = rng.randint(10, 60), rng.randint(10, 60), rng.randint(3, 30)
    if rng.random() < 0.5:
        dx, dy, dz = rng.randint(-20, 20), rng.randint(-20, 20), _f(z / 2)
        desc = (f"A rectangular block {x} mm (X) by {y} mm (Y) by {z} mm (Z), centred at "
                f"X={dx}, Y={dy}, sitting on the plane Z=0 (its bottom face at Z=0).")
        return desc, f"result = box({x}, {y}, {z}).translate({dx}, {dy}, {dz})\n"
    desc = f"A rectangular block {x} x {y} x {z} mm (X by Y by Z), centred at the origin."
    return desc, f"result = box({x}, {y}, {z})\n"


def _disk(rng: random.Random) -> Part:
    d, h = rng.randint(5, 30) * 2, rng.randint(2, 20)
    desc = f"A disk (cylinder with axis Z) of diameter {d} mm and thickness {h} mm, centred at the origin."
    return desc, f"result = cylinder({_f(d / 2)}, {h})\n"


def _plate_holes(rng: random.Random, n_holes: int) -> Part:
    x, y, t = rng.randint(8, 20) * 5, rng.randint(6, 14) * 5, rng.randint(3, 10)
    dia = rng.choice([4, 5, 6, 8])
    ix, iy = x / 2 - dia - rng.randint(2, 5), y / 2 - dia - rng.randint(2, 5)
    spots = [(-ix, -iy), (ix, iy), (ix, -iy), (-ix, iy)][:n_holes]
    if n_holes == 1:
        spots = [(rng.randint(-int(ix), int(ix)), rng.randint(-int(iy), int(iy)))]
    where = "; ".join(f"({_f(a)}, {_f(b)})" for a, b in spots)
    desc = (f"A flat plate {x} x {y} mm in XY and {t} mm thick (Z), centred at the origin, with "
            f"{n_holes} through-hole(s) of diameter {dia} mm along Z, centred at (X, Y) = {where}.")
    lines = [f"result = box({x}, {y}, {t})"]
    lines += [f"result = result - cylinder({_f(dia / 2)}, {t + 2}).translate({_f(a)}, {_f(b)}, 0)"
              for a, b in spots]
    return desc, "\n".join(lines) + "\n"


def _boss(rng: random.Random) -> Part:
    x, y, t = rng.randint(6, 14) * 5, rng.randint(6, 14) * 5, rng.randint(4, 10)
    d, h = rng.randint(3, 8) * 2, rng.randint(5, 20)
    desc = (f"A base block {x} x {y} x {t} mm (X, Y, Z) whose bottom face lies on Z=0, centred "
            f"on the Z axis, with a cylindrical boss of diameter {d} mm and height {h} mm "
            f"standing on its top face, on the Z axis.")
    prog = (f"base = box({x}, {y}, {t}).translate(0, 0, {_f(t / 2)})\n"
            f"boss = cylinder({_f(d / 2)}, {h}).translate(0, 0, {_f(t + h / 2)})\n"
            "result = base + boss\n")
    return desc, prog


def _shaft(rng: random.Random, keyway: bool) -> Part:
    diam = sorted(rng.sample(range(5, 21), 3), reverse=True)
    lens = [rng.randint(2, 8) * 5 for _ in diam]
    diam = [d * 2 for d in diam]
    secs = ", then ".join(f"diameter {d} mm for {L} mm" for d, L in zip(diam, lens, strict=True))
    desc = (f"A stepped shaft along +Z starting at Z=0 on the Z axis, made of coaxial sections: "
            f"{secs}.")
    lines, z = [], 0
    for i, (d, L) in enumerate(zip(diam, lens, strict=True)):
        lines.append(f"s{i} = cylinder({_f(d / 2)}, {L}).translate(0, 0, {_f(z + L / 2)})")
        z += L
    lines.append("result = s0 + s1 + s2")
    if keyway:
        w, depth = max(2, diam[0] // 5), max(1, diam[0] // 8)
        kz = lens[0] / 2
        lines.append(f"key = box({w}, {depth * 2}, {lens[0] - 4}).translate(0, {_f(diam[0] / 2)}, "
                     f"{_f(kz)})")
        hole = max(2, diam[1] // 4)
        hz = lens[0] + lens[1] / 2
        lines.append(f"cross = cylinder({_f(hole / 2)}, {diam[1] + 4}).rotate(90, 0, 0)"
                     f".translate(0, 0, {_f(hz)})")
        lines.append("result = result - key - cross")
        desc += (f" A keyway {w} mm wide (X) and {depth} mm deep is cut into the top (+Y side) of "
                 f"the first section along Z from {_f(kz - (lens[0] - 4) / 2)} to "
                 f"{_f(kz + (lens[0] - 4) / 2)} mm. A cross hole of diameter {hole} mm along the "
                 f"Y axis passes through the middle of the second section (Z={_f(hz)}).")
    return desc, "\n".join(lines) + "\n"


def _flange(rng: random.Random) -> Part:
    od, t = rng.randint(20, 40) * 2, rng.randint(4, 10)
    hub_d, hub_h = rng.randint(5, od // 4) * 2, rng.randint(5, 20)
    bore = rng.randint(2, hub_d // 2 - 2) * 2
    n, hole = rng.choice([4, 5, 6]), rng.choice([4, 5, 6])
    pcd = (od / 2 + hub_d / 2) / 2 * 2
    desc = (f"A flange: a disk of diameter {od} mm and thickness {t} mm lying on Z=0 (Z from 0 to "
            f"{t}), with a coaxial hub of diameter {hub_d} mm rising {hub_h} mm above it, a "
            f"centre bore of diameter {bore} mm through everything, and {n} bolt holes of "
            f"diameter {hole} mm on a {_f(pcd)} mm pitch-circle diameter, the first on the +X "
            f"axis, evenly spaced.")
    lines = [f"disk = cylinder({_f(od / 2)}, {t}).translate(0, 0, {_f(t / 2)})",
             f"hub = cylinder({_f(hub_d / 2)}, {hub_h}).translate(0, 0, {_f(t + hub_h / 2)})",
             f"result = disk + hub - cylinder({_f(bore / 2)}, {t + hub_h + 2})"
             f".translate(0, 0, {_f((t + hub_h) / 2)})",
             f"for i in range({n}):",
             f"    a = radians(360 * i / {n})",
             f"    result = result - cylinder({_f(hole / 2)}, {t + 2})"
             f".translate({_f(pcd / 2)} * cos(a), {_f(pcd / 2)} * sin(a), {_f(t / 2)})"]
    return desc, "\n".join(lines) + "\n"


def _bracket(rng: random.Random) -> Part:
    w, d, t = rng.randint(8, 12) * 5, rng.randint(6, 10) * 5, rng.randint(4, 8)
    h = rng.randint(6, 10) * 5
    hole = rng.choice([5, 6, 8])
    g = min(d, h) - t - rng.randint(5, 10)
    desc = (f"An L-bracket. Base plate: {w} mm along X, {d} mm along Y, {t} mm thick, occupying "
            f"X in [-{_f(w / 2)}, {_f(w / 2)}], Y in [0, {d}], Z in [0, {t}]. Upright plate: "
            f"{w} mm along X, {t} mm thick along Y, occupying Y in [0, {t}] and Z in [0, {h}]. "
            f"Two through-holes of diameter {hole} mm go vertically through the base at "
            f"X = +-{_f(w / 4)}, Y = {_f((d + t) / 2)}; one horizontal through-hole of "
            f"diameter {hole} mm goes along Y through the upright at X = 0, Z = {_f((h + t) / 2)}, "
            f"from Y = -1 to Y = {t + 1} (so it also cuts 1 mm into anything behind it). "
            f"A triangular gusset, {t} mm thick (X in [-{_f(t / 2)}, {_f(t / 2)}]), fills the "
            f"corner: the triangle with corners (Y, Z) = ({t}, {t}), ({t + g}, {t}), "
            f"({t}, {t + g}).")
    lines = [
        f"base = box({w}, {d}, {t}).translate(0, {_f(d / 2)}, {_f(t / 2)})",
        f"up = box({w}, {t}, {h}).translate(0, {_f(t / 2)}, {_f(h / 2)})",
        f"sq = box({t}, {g}, {g}).translate(0, {_f(t + g / 2)}, {_f(t + g / 2)})",
        f"half = box({t}, {g} * sqrt(2), {g} * sqrt(2)).rotate(45, 0, 0).translate(0, {t}, {t})",
        "result = base + up + (sq & half)",
        "for sx in range(2):",
        f"    result = result - cylinder({_f(hole / 2)}, {t + 2})"
        f".translate({_f(w / 4)} * (2 * sx - 1), {_f((d + t) / 2)}, {_f(t / 2)})",
        f"result = result - cylinder({_f(hole / 2)}, {t + 2}).rotate(90, 0, 0)"
        f".translate(0, {_f(t / 2)}, {_f((h + t) / 2)})",
    ]
    return desc, "\n".join(lines) + "\n"


def make_part(rng: random.Random, difficulty: int) -> Part:
    """A (description, program) pair of ``difficulty`` 1..5.

    Raises:
        ValueError: difficulty outside 1..5.
    """
    if difficulty == 1:
        return rng.choice([_block, _disk])(rng)
    if difficulty == 2:
        return _plate_holes(rng, 1) if rng.random() < 0.5 else _boss(rng)
    if difficulty == 3:
        return _plate_holes(rng, rng.randint(2, 4)) if rng.random() < 0.5 else _shaft(rng, False)
    if difficulty == 4:
        return _flange(rng)
    if difficulty == 5:
        return _bracket(rng) if rng.random() < 0.5 else _shaft(rng, True)
    raise ValueError(f"difficulty must be in 1..5, got {difficulty}")
