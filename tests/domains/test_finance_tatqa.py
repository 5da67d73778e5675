"""finance/tatqa-v1: every gold answer scores 1.0; tricky predictions by hand."""

from __future__ import annotations

import json
import time

import pytest

from polyrl.domains.finance.tatqa import TatQaDomain
from polyrl.errors import ConfigError


@pytest.fixture(scope="module")
def domain(shared_data) -> TatQaDomain:
    return TatQaDomain(path=shared_data / "tatqa" / "tatqa_dataset_dev.json")


def test_every_dev_gold_answer_scores_one_and_empty_scores_zero(domain: TatQaDomain) -> None:
    start = time.perf_counter()
    tasks = list(domain.tasks("test"))
    assert len(tasks) == 1665  # 1668 questions: one asked twice, one pair contradicts
    assert len({t.prompt[0]["content"] for t in tasks}) == len(tasks)
    bad = [t.id for t in tasks if domain.score(t, t.reference).reward != 1.0
           or not domain.score(t, t.reference).passed]
    assert bad == []
    assert all(domain.score(t, "").reward == 0.0 for t in tasks)
    assert time.perf_counter() - start < 60


def test_scale_handling_on_a_real_question(domain: TatQaDomain) -> None:
    task = next(t for t in domain.tasks("test")
                if t.id == "4960801d-277d-4f79-8eca-c4d0200fa9d6")  # $1,496.5 million
    assert domain.score(task, "Answer: 1,496.5").reward == 1.0
    assert domain.score(task, "The total is\nAnswer: 1.4965 billion").reward == 1.0
    assert domain.score(task, "Answer: $1,496.5 thousand").reward == 0.0


def test_a_year_answer_needs_the_year(domain: TatQaDomain) -> None:
    task = next(t for t in domain.tasks("test")
                if t.id == "f4142349-eb72-49eb-9a76-f3ccb1010cbc")  # gold 2019
    assert domain.score(task, "Answer: 2019").passed
    for year in (2017, 2018, 2020, 2021):
        score = domain.score(task, f"Answer: {year}")
        assert score.reward == 0.0 and not score.passed


def test_candidate_lists_score_only_for_multi_span_golds(domain: TatQaDomain) -> None:
    tasks = {t.id: t for t in domain.tasks("test")}
    year = tasks["f4142349-eb72-49eb-9a76-f3ccb1010cbc"]  # span, gold 2019
    for hedge in ("Answer: 2019 | 2018", "Answer: 2017 | 2018 | 2019"):
        assert domain.score(year, hedge).reward == 0.0
    change = tasks["eb787966-fa02-401f-bfaf-ccabf3828b23"]  # arithmetic, gold -12.6 million
    assert domain.score(change, "Answer: -12.6 million | -12.5 million").reward == 0.0
    multi = tasks["593c4388-5209-4462-8b83-b429c8612c25"]  # multi-span, three types
    partial = domain.score(multi, "Answer: fixed-price type | cost-plus type")
    assert partial.reward == pytest.approx(0.8) and not partial.passed


def test_correct_answers_in_other_formats(domain: TatQaDomain) -> None:
    task = next(t for t in domain.tasks("test")
                if t.id == "eb787966-fa02-401f-bfaf-ccabf3828b23")  # -12.6 million
    for text in ("Answer: \\boxed{-12.6}", "Answer: \\boxed{-12.6 million}",
                 "Answer: -12.6 million dollars", "Answer: -1.26e7",
                 "Answer: -12.6 million USD.", "Answer: -$12.6 million"):
        assert domain.score(task, text).passed, text
    assert not domain.score(task, "Answer: -1.27e7").passed


def test_missing_data_names_the_path(tmp_path) -> None:
    with pytest.raises(ConfigError, match="tatqa_missing.json"):
        list(TatQaDomain(path=tmp_path / "tatqa_missing.json").tasks("test"))
    with pytest.raises(ConfigError, match="tatqa_missing.json"):
        TatQaDomain(path=tmp_path / "tatqa_missing.json").split_sizes()


def test_a_question_asked_twice_is_one_task_or_none_when_the_golds_differ(tmp_path) -> None:
    def q(uid: str, text: str, answer: str) -> dict:
        return {"uid": uid, "question": text, "answer": answer, "answer_type": "span",
                "scale": "", "derivation": ""}
    doc = {"table": {"uid": "t", "table": [["a", "1"]]},
           "paragraphs": [{"order": 1, "text": "p"}],
           "questions": [q("1", "What is a?", "1"), q("2", "What is a?", "1"),
                         q("3", "What is b?", "2"), q("4", "What is b?", "3"),
                         q("5", "What is c?", "4")]}
    path = tmp_path / "tatqa.json"
    path.write_text(json.dumps([doc]))
    assert [t.id for t in TatQaDomain(path=path).tasks("test")] == ["1", "5"]
