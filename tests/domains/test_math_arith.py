import random

import pytest

from polyrl.domains import check_domain
from polyrl.domains.math import Arithmetic, evaluate, generate_expression
from polyrl.domains.math.arith import split_of
from polyrl.types import Completion


@pytest.fixture(scope="module")
def arith():
    return Arithmetic()


def task_with(arith, expr, answer):
    task = next(arith.tasks("train", n=1, difficulty=1))
    task.metadata = {"answer": str(answer), "expression": expr}
    task.reference = str(answer)
    return task


@pytest.mark.parametrize(
    "completion, exact, digits",
    [
        ("68", 1.0, 1.0),
        ("The answer is 68.", 1.0, 1.0),
        ("\\boxed{68}", 1.0, 1.0),
        ("#### 68", 1.0, 1.0),
        ("68.0", 1.0, 1.0),  # the same integer, written as a decimal
        ("69", 0.0, 0.5),  # tens digit right: 1 of 2 positions
        ("168", 0.0, 2 / 3),  # right-aligned: 8 and 6 agree, 3 positions
        ("8", 0.0, 0.5),  # units agree, 2 positions
        ("-68", 0.0, 0.5),  # every digit right, sign wrong: halved
        ("68.5", 0.0, 0.0),  # not an integer
        ("6,8", 0.0, 0.5),  # two numbers 6 and 8; the last (8) is read
        ("", 0.0, 0.0),
        ("no idea", 0.0, 0.0),
        ("68%", 0.0, 1.0),  # a percentage is not the integer 68, digits still agree
    ],
)
def test_reward_hand_values_gold_68(arith, completion, exact, digits):
    task = task_with(arith, "23+45", 68)
    score = arith.score(task, completion)
    assert score.components == pytest.approx({"exact": exact, "digits": digits})
    assert score.reward == pytest.approx(0.5 * exact + 0.5 * digits)
    assert score.passed is (exact == 1.0)


def test_negative_gold_and_completion_objects(arith):
    task = task_with(arith, "19-583-55", -619)
    assert arith.score(task, Completion(task.id, "-619")).reward == 1.0
    score = arith.score(task, "619")
    assert score.components["digits"] == 0.5 and score.reward == 0.25
    assert arith.score(task, "-610").components["digits"] == pytest.approx(2 / 3)


def test_difficulty_ladder_sizes_and_values(arith):
    rng = random.Random(3)
    for d in range(1, 6):
        for _ in range(200):
            text, value = generate_expression(rng, d)
            assert evaluate(text) == value == eval(text)  # noqa: S307 - digits and +-*() only
    tasks = list(arith.tasks("train", n=300, difficulty=1, seed=4))
    for t in tasks:
        a, b = t.prompt[0]["content"].rstrip("=").split("+")
        assert 10 <= int(a) <= 99 and 10 <= int(b) <= 99 and int(t.reference) == int(a) + int(b)
        assert len(t.prompt[0]["content"].encode()) <= 120 and len(t.reference) <= 24
    hard = list(arith.tasks("train", n=50, difficulty=5, seed=4))
    assert all(t.prompt[0]["content"].count("(") >= 1 or "*" in t.prompt[0]["content"]
               for t in hard)
    assert sum(len(t.reference.lstrip("-")) >= 7 for t in hard) >= 25  # long exact answers
    assert {t.difficulty for t in arith.tasks("test", n=100)} == {1, 2, 3, 4, 5}


def test_splits_are_disjoint_by_expression(arith):
    train = {t.metadata["expression"] for t in arith.tasks("train", n=2000, difficulty=1)}
    test = {t.metadata["expression"] for t in arith.tasks("test", n=500, difficulty=1)}
    assert not train & test
    assert all(split_of(e, arith.test_per_10) == "train" for e in train)
    assert all(split_of(e, arith.test_per_10) == "test" for e in test)
    d1 = [f"{a}+{b}" for a in range(10, 100) for b in range(10, 100)]
    share = sum(split_of(e, arith.test_per_10) == "test" for e in d1) / len(d1)
    assert 0.27 < share < 0.33  # 30% of difficulty 1 is held out
    ids = [t.id for t in arith.tasks("test", n=3, seed=7, difficulty=2)]
    assert ids == ["test/d2/s7/0", "test/d2/s7/1", "test/d2/s7/2"]


def test_bad_arguments(arith):
    with pytest.raises(ValueError, match="pass n"):
        next(arith.tasks("train"))
    with pytest.raises(ValueError, match="split"):
        next(arith.tasks("dev", n=1))
    with pytest.raises(ValueError, match="1..5"):
        next(arith.tasks("train", n=1, difficulty=0))
    with pytest.raises(ValueError, match="1..5"):
        generate_expression(random.Random(0), 6)


def test_checker_passes_on_every_difficulty(arith):
    for d in range(1, 6):
        report = check_domain(arith, n=8, seed=d, difficulty=d)
        assert report.ok, (d, report.problems)
