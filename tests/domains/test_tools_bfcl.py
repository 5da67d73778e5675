"""tools/bfcl-v1: the loader scores every gold answer 1.0 on the 400 simple-python items."""

from __future__ import annotations

from pathlib import Path

import pytest

from polyrl.domains.checker import check_domain
from polyrl.domains.tools.bfcl import BfclDomain, format_reference_python, load_bfcl
from polyrl.errors import ConfigError


def test_all_400_gold_answers_score_one(shared_data: Path) -> None:
    tasks = load_bfcl(shared_data / "bfcl")
    assert len(tasks) == 400
    assert tasks[0].id == "simple_python_0"
    domain = BfclDomain(shared_data / "bfcl")
    for t in tasks:
        for answer in (domain.oracle(t), format_reference_python(t)):
            s = domain.score(t, answer)
            assert s.reward == 1.0 and s.passed, (t.id, answer, s)
        assert domain.score(t, "").reward == 0.0


def test_check_and_splits(shared_data: Path) -> None:
    domain = BfclDomain(shared_data / "bfcl")
    sizes = domain.split_sizes()
    assert sizes["train"] + sizes["test"] == 400 and sizes["train"] > 50
    report = check_domain(domain, n=20)
    assert report.ok, report.problems


def test_wrong_value_loses_credit(shared_data: Path) -> None:
    domain = BfclDomain(shared_data / "bfcl")
    t = next(t for t in load_bfcl(shared_data / "bfcl") if t.id == "simple_python_1")
    assert domain.score(t, "math.factorial(number=5)").reward == 1.0
    assert domain.score(t, "math.factorial(number=6)").reward == pytest.approx(0.1 + 0.2 + 0.7 * 0.3)
    assert domain.score(t, 'math.factorial(number="5")').passed is False


def test_missing_files_give_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="BFCL file not found"):
        load_bfcl(tmp_path)
    (tmp_path / "BFCL_v4_simple_python.json").write_text("{bad json\n")
    (tmp_path / "possible_answer_BFCL_v4_simple_python.json").write_text("")
    with pytest.raises(ConfigError, match="line 1"):
        load_bfcl(tmp_path)
