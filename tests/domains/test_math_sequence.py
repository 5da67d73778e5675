import random

import pytest

from polyrl.domains import check_domain
from polyrl.domains.math import NumberSequence, generate_sequence
from polyrl.domains.math.procedural import split_of
from polyrl.domains.math.sequence import render
from polyrl.domains.registry import get_domain


@pytest.fixture(scope="module")
def seq():
    return NumberSequence()


def _next_by_rule(terms: list[int], rule: str) -> int:
    """The next term recomputed from the rule text alone (an independent oracle)."""
    if rule.startswith("arithmetic"):
        return terms[-1] + int(rule.split()[-1])
    if rule.startswith("geometric"):
        return terms[-1] * int(rule.split()[-1])
    if rule.startswith("alternating"):
        s1, s2 = (int(x) for x in rule.split("steps ")[1].split(", "))
        return terms[-1] + (s1 if len(terms) % 2 == 1 else s2)
    if rule.startswith("quadratic"):
        diffs = [b - a for a, b in zip(terms, terms[1:], strict=False)]
        return terms[-1] + diffs[-1] + (diffs[-1] - diffs[-2])
    if rule == "a(n)=a(n-1)+a(n-2)":
        return terms[-1] + terms[-2]
    k, c = rule.split("=")[1].split("*a(n-1)")
    return int(k) * terms[-1] + int(c)


def test_every_difficulty_follows_its_rule():
    rng = random.Random(5)
    for d in range(1, 6):
        for _ in range(300):
            terms, value, rule = generate_sequence(rng, d)
            assert value == _next_by_rule(terms, rule), (d, terms, rule)
            assert len(terms) >= 3


def test_difficulty_one_fits_the_tiny_model(seq):
    tasks = list(seq.tasks("train", n=500, difficulty=1, seed=2))
    for t in tasks:
        text = t.prompt[0]["content"]
        assert text.endswith(",?") and len(text.encode()) <= 17 and len(t.reference) <= 3
        terms = [int(x) for x in text[:-2].split(",")]
        assert len(terms) in (3, 4) and all(0 <= x <= 999 for x in terms)
        step = terms[1] - terms[0]
        assert 1 <= abs(step) <= 9 and int(t.reference) == terms[-1] + step
    assert len({t.prompt[0]["content"] for t in tasks}) > 450  # hardly any repeats


def test_reward_is_arithmetics(seq):
    task = next(seq.tasks("train", n=1, difficulty=1, seed=0))
    gold = task.reference
    assert seq.score(task, gold).reward == 1.0 and seq.score(task, gold).passed
    wrong_units = gold[:-1] + str((int(gold[-1]) + 1) % 10)
    score = seq.score(task, wrong_units)
    assert score.components["exact"] == 0.0 and not score.passed
    assert score.components["digits"] == pytest.approx((len(gold) - 1) / len(gold))
    assert seq.score(task, "").reward == 0.0 and seq.score(task, "no idea").reward == 0.0


def test_repeating_the_terms_reads_the_next_one(seq):
    task = next(t for t in seq.tasks("test", n=50, difficulty=2)
                if all(abs(v) >= 100 for v in t.metadata["terms"]))
    gold = task.metadata["answer"]
    listed = task.prompt[0]["content"].replace("?", gold)  # e.g. 419,447,475,503,531
    for text in (listed, listed.replace(",", ", "), f"The sequence is {listed}."):
        assert seq.score(task, text).reward == 1.0, text
    wrong = task.prompt[0]["content"].replace("?", str(int(gold) + 1))
    assert seq.score(task, wrong).components["exact"] == 0.0
    assert seq.score(task, task.prompt[0]["content"]).reward == 0.0  # an echo


def test_splits_are_disjoint_and_ids_stable(seq):
    train = {t.prompt[0]["content"] for t in seq.tasks("train", n=2000, difficulty=[1, 2])}
    test = {t.prompt[0]["content"] for t in seq.tasks("test", n=300, difficulty=[1, 2])}
    assert not train & test
    assert all(split_of(p, seq.test_per_10) == "test" for p in test)
    assert all(split_of(p, seq.test_per_10) == "train" for p in train)
    share = sum(split_of(str(k), seq.test_per_10) == "test" for k in range(10_000)) / 10_000
    assert 0.27 < share < 0.33  # 30% of the space is held out
    assert render([1, 2, 3]) == "1,2,3,?"
    ids = [t.id for t in seq.tasks("test", n=2, seed=7, difficulty=3)]
    assert ids == ["test/d3/s7/0", "test/d3/s7/1"]


def test_bad_arguments(seq):
    with pytest.raises(ValueError, match="pass n"):
        next(seq.tasks("train"))
    with pytest.raises(ValueError, match="split"):
        next(seq.tasks("dev", n=1))
    with pytest.raises(ValueError, match="1..5"):
        generate_sequence(random.Random(0), 6)
    with pytest.raises(ValueError, match="test_per_10"):
        NumberSequence(test_per_10=0)


def test_registered_and_checker_passes_on_every_difficulty(seq):
    assert get_domain("math/sequence-v1").id == "math/sequence-v1"
    for d in range(1, 6):
        report = check_domain(seq, n=8, seed=d, difficulty=d)
        assert report.ok, (d, report.problems)
