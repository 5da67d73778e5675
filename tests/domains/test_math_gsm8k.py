import json

import pytest

from polyrl.domains import check_domain
from polyrl.domains.math import GSM8K, load_gsm8k
from polyrl.domains.math.gsm8k import default_path
from polyrl.errors import ConfigError


@pytest.fixture(scope="module")
def gsm_path(shared_data):
    return shared_data / "gsm8k" / "test.jsonl"


@pytest.fixture(scope="module")
def gsm(gsm_path):
    return GSM8K(gsm_path)


def all_tasks(domain):
    return list(domain.tasks("train")) + list(domain.tasks("test"))


def test_gold_answers_score_one_on_all_1319_items(gsm):
    tasks = all_tasks(gsm)
    assert len(tasks) == 1319
    for t in tasks:
        gold = t.metadata["answer"]
        for answer in (t.reference, f"#### {gold}", f"So it is \\boxed{{{gold}}}.", gold):
            score = gsm.score(t, answer)
            assert score.reward == 1.0 and score.passed, (t.id, answer)
        assert gsm.score(t, "").reward == 0.0


def test_ids_keep_the_line_number_and_splits_partition_the_file(gsm, gsm_path):
    lines = gsm_path.read_text(encoding="utf-8").splitlines()
    tasks = all_tasks(gsm)
    assert sorted(int(t.id.rsplit("/", 1)[1]) for t in tasks) == list(range(1319))
    t0 = next(t for t in tasks if t.id == "gsm8k/test/0")
    assert json.loads(lines[0])["question"] in t0.prompt[0]["content"]
    assert t0.metadata == {"answer": "18", "line": 0}
    assert "<<" not in t0.reference and t0.reference.endswith("#### 18")
    sizes = gsm.split_sizes()
    assert sizes["train"] + sizes["test"] == 1319 and 150 < sizes["test"] < 350
    assert {t.split for t in gsm.tasks("test")} == {"test"}
    assert not {t.id for t in gsm.tasks("train")} & {t.id for t in gsm.tasks("test")}
    assert GSM8K(gsm_path, test_percent=100).split_sizes() == {"train": 0, "test": 1319}
    assert {t.difficulty for t in tasks} == {1, 2, 3, 4, 5}


def test_thousands_and_wrong_answers(gsm):
    task = next(t for t in all_tasks(gsm) if int(t.metadata["answer"]) >= 1000)
    gold = int(task.metadata["answer"])
    assert gsm.score(task, f"#### {gold:,}").reward == 1.0
    assert gsm.score(task, f"\\boxed{{{gold:,}}}").reward == 1.0
    score = gsm.score(task, f"#### {gold + 1}")
    assert score.reward == 0.0 and score.passed is False
    # an explicit marker wins over a later stray number; a bare last number is also read
    assert gsm.score(task, f"#### {gold}\nI used 3 steps.").components == {
        "correct": 1.0, "marked": 1.0}
    assert gsm.score(task, f"it is {gold}").components == {"correct": 1.0, "marked": 0.0}


def test_the_final_marker_wins_and_a_hedge_scores_zero(gsm):
    task = next(t for t in all_tasks(gsm) if t.id == "gsm8k/test/253")
    assert task.metadata["answer"] == "18"
    cases = {
        "\\boxed{18} ... wait, actually #### 19": 0.0,  # the later marker (####) wins
        "#### 18\n\nFinal: \\boxed{23}": 0.0,  # the later marker (box) wins
        "#### 23\n\nFinal: \\boxed{18}": 1.0,
        "\\boxed{23}\nSo\n#### 18": 1.0,
        "#### 17 or 18": 0.0,  # a hedge: the marker holds two numbers
        "\\boxed{17, 18}": 0.0,
        "#### $18 dollars": 1.0,
        "#### 18%": 1.0,  # a percent sign: the face value
        "#### 1800%": 0.0,  # never value / 100 against a bare gold
    }
    for text, want in cases.items():
        assert gsm.score(task, text).reward == want, text


def test_seeded_order_and_n(gsm):
    a = [t.id for t in gsm.tasks("train", n=10, seed=1)]
    assert a == [t.id for t in gsm.tasks("train", n=10, seed=1)]
    assert a != [t.id for t in gsm.tasks("train", n=10, seed=2)]
    assert len(list(gsm.tasks("test", difficulty=[1]))) == sum(
        t.difficulty == 1 for t in gsm.tasks("test"))


def test_checker_passes(gsm):
    report = check_domain(gsm, n=16)
    assert report.ok, report.problems
    assert report.disjoint is True


def test_missing_and_malformed_files(tmp_path, monkeypatch):
    missing = GSM8K(tmp_path / "nope.jsonl")  # construction never reads the file
    with pytest.raises(ConfigError, match="nope.jsonl: GSM8K data not found .set POLYRL_DATA_DIR"):
        missing.split_sizes()
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q", "answer": "x\\n#### 3"}\n{"question": "q"}\n')
    with pytest.raises(ConfigError, match="line 2: bad GSM8K row"):
        load_gsm8k(bad)
    bad.write_text('{"question": "q", "answer": "no marker"}\n')
    with pytest.raises(ConfigError, match="line 1: answer has no"):
        load_gsm8k(bad)
    monkeypatch.setenv("POLYRL_DATA_DIR", str(tmp_path))
    assert default_path() == tmp_path / "gsm8k" / "test.jsonl"
    good = tmp_path / "gsm8k"
    good.mkdir()
    (good / "test.jsonl").write_text('{"question": "1+1?", "answer": "1+1=2\\n#### 2"}\n')
    assert GSM8K(test_percent=100).split_sizes() == {"train": 0, "test": 1}
