"""The example configs load, and examples/quickstart.yaml is the embedded default."""

from __future__ import annotations

from pathlib import Path

import pytest

from polyrl.config import load_config

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.yaml")))
def test_example_config_is_valid(name: str):
    cfg = load_config(EXAMPLES / name)
    assert cfg.domains, name


def test_examples_quickstart_is_the_embedded_default():
    assert load_config(EXAMPLES / "quickstart.yaml") == load_config()


def test_quickstart_meets_the_issue_shape():
    cfg = load_config()
    assert len(cfg.domains) >= 5
    assert cfg.model.kind == "tiny" and cfg.rollout.backend == "hf"
    assert cfg.curriculum.kind == "learning_progress" and cfg.replay.enabled
    assert cfg.run.time_budget_s > 0  # the time budget is explicit
