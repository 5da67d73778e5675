"""``cad/gen-v1``: write a solid-modelling program for a part described in words.

The completion's program (last ```python block, else the whole text) is checked
against the documented language subset (``subset``), run in the sandbox
(``runner``), and its mesh compared with the target built from the generating
program (``scoring``): reward = 0.3 iou + 0.1 chamfer + 0.1 silhouette + 0.1 valid
+ 0.3 features + 0.1 extra; ``features`` and ``extra`` are scaled by
``min(1, iou / IOU_GATE)`` (0.5): they measure absences, which a speck has too.
``Score.passed``: iou >= 0.95, silhouette >= 0.95, valid, normalised Chamfer
(noise-corrected, see ``scoring``) <= 0.02, every feature matched:
``features_min >= FEATURE_PASS`` (each of the target's holes, pockets and slots has
IoU >= 0.5 with the candidate's, and the candidate has no void the target lacks),
and no extra material: ``extra_shells == 0`` (no closed surface the target lacks;
pieces within 0.1% of the diagonal of each other are one, ``scoring.SHELL_TOUCH``)
and ``overhang <= OVERHANG_PASS`` (the candidate's bounding box reaches out of the
target's by at most 2% of its diagonal) and ``hausdorff <= HAUSDORFF_PASS`` (no point
of the candidate's surface lies farther than 2% of the diagonal from the target's
material: junk joined to the part by a thin rod, kept inside its box).
The global measures alone passed a plain box for a plate with holes (IoU 0.997);
``features`` is what tells them apart (0 for the box). They also passed the oracle's
part plus a far or hidden 0.01 mm speck (reward 1.0); ``extra`` fails it.
"""

from __future__ import annotations

import random
import zlib
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from polyrl.domains.base import Answer, Domain, RewardFn, Rubric, answer_text, procedural_levels
from polyrl.domains.cad import dsl
from polyrl.domains.cad.parts import make_part
from polyrl.domains.cad.runner import run_program
from polyrl.domains.cad.scoring import Mesh, ShapeScores, TargetCache, compare
from polyrl.domains.cad.subset import check_program
from polyrl.domains.extract import extract_code
from polyrl.errors import GraderError
from polyrl.types import Score, Task

DOMAIN_ID = "cad/gen-v1"
_ALLOWED = frozenset(dsl.NAMES)


@dataclass(frozen=True)
class CadAttempt:
    """What the rubric reads: the shape scores (None: nothing to compare) and flags."""

    shape: ShapeScores | None
    in_subset: bool
    ran: bool
    failure: str = ""


def _get(attr: str) -> Any:
    return lambda t, a: getattr(a.shape, attr) if a.shape is not None else 0.0


def _gated(attr: str) -> Any:
    """``attr`` times ``min(1, iou / IOU_GATE)``: what ``features`` and ``extra`` measure is
    an absence (no wrong hole, no extra material), which a candidate with almost no material
    has too. A 0.001 mm cube at the origin scored 0.5 on every part without holes (features
    1, extra 1, valid 1) and 0.32 on average (a 50 x 40 x 10 box: 0.40); a part squashed
    flat 0.32."""
    def term(t: Task, a: CadAttempt) -> float:
        if a.shape is None:
            return 0.0
        return getattr(a.shape, attr) * min(1.0, a.shape.iou / IOU_GATE)
    return term


IOU_GATE = 0.5
FEATURE_PASS = 0.5
OVERHANG_PASS = 0.02
HAUSDORFF_PASS = 0.02  # = scoring.HAUSDORFF_DEAD_ZONE: ``hausdorff`` is exact above it

RUBRIC = Rubric([
    RewardFn("iou", _get("iou"), 0.3),
    RewardFn("chamfer", _get("chamfer"), 0.1),
    RewardFn("silhouette", _get("silhouette"), 0.1),
    RewardFn("valid", _get("valid"), 0.1),
    RewardFn("features", _gated("features"), 0.3),
    RewardFn("extra", _gated("extra"), 0.1),
    RewardFn("extra_shells", _get("extra_shells"), 0.0),
    RewardFn("overhang", lambda t, a: a.shape.overhang if a.shape else -1.0, 0.0),
    RewardFn("hausdorff", lambda t, a: a.shape.hausdorff if a.shape else -1.0, 0.0),
    RewardFn("features_min", _get("features_min"), 0.0),
    RewardFn("target_features", _get("target_features"), 0.0),
    RewardFn("chamfer_norm", lambda t, a: a.shape.chamfer_norm if a.shape else -1.0, 0.0),
    RewardFn("triangles", _get("triangles"), 0.0),
    RewardFn("in_subset", lambda t, a: float(a.in_subset), 0.0),
    RewardFn("ran", lambda t, a: float(a.ran), 0.0),
])


class _TargetLRU:
    """Target caches by generating program (built on the host with ``dsl.build``)."""

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self._items: OrderedDict[str, TargetCache] = OrderedDict()

    def get(self, program: str) -> TargetCache:
        """The target cache of ``program`` (built on first use).

        Raises:
            GraderError: the program does not build.
        """
        hit = self._items.get(program)
        if hit is not None:
            self._items.move_to_end(program)
            return hit
        try:
            verts, tris = dsl.mesh_arrays(dsl.build(program))
        except Exception as e:  # the generator's own program failing is a grader bug
            raise GraderError(f"target program failed to build: {e!r}") from e
        cache = TargetCache(Mesh(verts, tris))
        self._items[program] = cache
        if len(self._items) > self.size:
            self._items.popitem(last=False)
        return cache


def make_task(difficulty: int, index: int, seed: int) -> Task:
    """Task ``index`` of ``difficulty`` for ``seed`` (split chosen by a prompt hash)."""
    rng = random.Random(f"cad:{seed}:{index}:{difficulty}")
    desc, program = make_part(rng, difficulty)
    prompt = f"{dsl.DOC}\n\nModel this part:\n{desc}"
    return Task(
        id=f"cad-gen-s{seed}-d{difficulty}-{index}",
        domain=DOMAIN_ID,
        split="test" if zlib.crc32(desc.encode()) % 5 == 0 else "train",
        difficulty=difficulty,
        prompt=[{"role": "user", "content": prompt}],
        reference=f"```python\n{program}```",
        metadata={"program": program, "description": desc},
    )


class CadGenDomain(Domain):
    """Generated parts (plates, bosses, shafts, flanges, brackets) to model with CSG.

    Args:
        server: sandbox with ``run_python(code) -> ExecResult``; default the shared
            ForkServer (``runner.default_server``).
    """

    id = DOMAIN_ID
    family = "cad"
    description = "solid modelling: CSG program for a described part; IoU/Chamfer/silhouettes/holes"
    binary = True

    def __init__(self, server: Any = None) -> None:
        self.server = server
        self._targets = _TargetLRU()

    def tasks(
        self,
        split: str,
        *,
        difficulty: int | Sequence[int] | None = None,
        n: int | None = None,
        seed: int = 0,
    ) -> Iterator[Task]:
        """``n`` generated parts of ``split``, cycling through ``difficulty`` (default 1..5)."""
        levels = procedural_levels(self.id, split, difficulty, n)
        made, index = 0, 0
        while made < n:
            task = make_task(levels[made % len(levels)], index, seed)
            index += 1
            if task.split == split:
                made += 1
                yield task

    def attempt(self, task: Task, text: str) -> CadAttempt:
        """Check, run and measure the program in ``text`` (no rubric weights)."""
        program = extract_code(text, "python", fallback_to_text=True) or ""
        if not program.strip():
            return CadAttempt(None, False, False, "empty")
        why = check_program(program, _ALLOWED)
        if why:
            return CadAttempt(None, False, False, why)
        outcome = run_program(program, self.server)
        if outcome.mesh is None:
            return CadAttempt(None, True, False, outcome.failure)
        shape = compare(self._targets.get(task.metadata["program"]), outcome.mesh)
        return CadAttempt(shape, True, True)

    def score(self, task: Task, answer: Answer) -> Score:
        """Weighted shape reward; see module docstring.

        Raises:
            SandboxError: the sandbox failed to run the program.
            GraderError: the target program failed to build.
        """
        att = self.attempt(task, answer_text(answer))
        score = RUBRIC.score(task, att)
        s = att.shape
        score.passed = bool(s and s.iou >= 0.95 and s.silhouette >= 0.95 and s.valid
                            and s.chamfer_norm <= 0.02 and s.features_min >= FEATURE_PASS
                            and s.extra_shells == 0 and s.overhang <= OVERHANG_PASS
                            and s.hausdorff <= HAUSDORFF_PASS)
        return score
