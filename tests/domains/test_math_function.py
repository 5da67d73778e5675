import random
import re

import pytest

from polyrl.domains import check_domain
from polyrl.domains.math import FunctionInduction, generate_function
from polyrl.domains.math.function import apply, render
from polyrl.domains.registry import get_domain
from polyrl.eval.evaluate import heldout_tasks

_POINT = re.compile(r"f\((-?\d+)\)=(-?\d+|\?)")


@pytest.fixture(scope="module")
def fun():
    return FunctionInduction()


def test_every_task_is_consistent_with_its_formula(fun):
    for d in range(1, 6):
        for t in fun.tasks("train", n=200, difficulty=d, seed=d):
            points = _POINT.findall(t.prompt[0]["content"])
            formula = t.metadata["formula"].replace("x", "({x})")
            for x, y in points:
                want = eval(formula.format(x=int(x)))  # noqa: S307 - digits, x and + - * % ( )
                assert (y == "?" and str(want) == t.reference) or int(y) == want, (d, t.prompt)
            xs = [x for x, _ in points]
            assert len(set(xs)) == len(xs)  # distinct points, the query among them


def test_difficulty_one_fits_the_tiny_model_and_is_determined_by_its_points(fun):
    tasks = list(fun.tasks("train", n=500, difficulty=1, seed=1))
    for t in tasks:
        text = t.prompt[0]["content"]
        assert len(text.encode()) <= 22 and 0 <= int(t.reference) <= 99
        (x1, y1), (x2, y2) = [(int(x), int(y)) for x, y in _POINT.findall(text)[:2]]
        a = (y2 - y1) // (x2 - x1)
        q = int(_POINT.findall(text)[2][0])
        assert y1 + a * (q - x1) == int(t.reference)  # two points fix a line
    assert len({t.prompt[0]["content"] for t in tasks}) > 480
    assert len(heldout_tasks(fun, 1024, seed=1000, difficulty=[1])) == 1024


def test_apply_render_and_reward(fun):
    co, formula = generate_function(random.Random(0), 4)
    assert formula.endswith(f"%{co['m']}") and 0 <= apply(co, 7) < co["m"]
    assert render([(1, 2), (3, 4)], 5) == "f(1)=2,f(3)=4,f(5)=?"
    task = next(fun.tasks("test", n=1, difficulty=2, seed=0))
    assert fun.score(task, task.reference).reward == 1.0
    assert fun.score(task, "nothing").reward == 0.0


def test_bad_arguments(fun):
    with pytest.raises(ValueError, match="pass n"):
        next(fun.tasks("train"))
    with pytest.raises(ValueError, match="split"):
        next(fun.tasks("dev", n=1))
    with pytest.raises(ValueError, match="1..5"):
        generate_function(random.Random(0), 0)


def test_registered_and_checker_passes_on_every_difficulty(fun):
    assert get_domain("math/function-v1").id == "math/function-v1"
    for d in range(1, 6):
        report = check_domain(fun, n=8, seed=d, difficulty=d)
        assert report.ok, (d, report.problems)


def test_difficulty_four_points_determine_the_answer(fun):
    """Five points of ``(a*x+b) % m`` (a 1..9, b 0..9, m 3..7) fit another function of
    the ladder that differs at the query in ~2% of draws (f(13)=2,f(5)=0,f(17)=0,f(7)=2,
    f(12)=1,f(15)=?: 1 or 4): a perfect solver's reward was a coin flip there."""
    family = [(a, b, m) for a in range(1, 10) for b in range(10) for m in range(3, 8)]
    for split in ("train", "test"):
        for t in fun.tasks(split, n=300, difficulty=4, seed=3):
            found = _POINT.findall(t.prompt[0]["content"])
            points = [(int(x), int(y)) for x, y in found[:-1]]
            query = int(found[-1][0])
            answers = {(a * query + b) % m for a, b, m in family
                       if all((a * x + b) % m == y for x, y in points)}
            assert answers == {int(t.reference)}, t.prompt[0]["content"]
