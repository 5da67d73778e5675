"""Tests of polyrl.eval.headroom: real probes (tiny model, real GRPO steps) per domain."""

from __future__ import annotations

from pathlib import Path

import pytest

from polyrl.config import load_config
from polyrl.domains.registry import get_domain
from polyrl.eval.headroom import headroom, policy_path
from polyrl.models.tiny import save_tiny


def test_headroom_probes_each_domain_and_ranks(tmp_path: Path):
    model = save_tiny(tmp_path / "m", hidden_size=32, num_layers=1, num_heads=2,
                      intermediate_size=64)
    cfg = load_config(None, ["train.prompts_per_step=2", "rollout.group_size=2",
                             "rollout.max_new_tokens=4", "run.torch_threads=1"])
    doms = [get_domain("math/arith-v1"), get_domain("finance/gen-v1")]
    ranked = headroom(cfg, str(model), doms, probe_steps=2, n=6, work_dir=tmp_path / "w")
    assert [r["rank"] for r in ranked] == [1, 2]
    assert {r["domain"] for r in ranked} == {"math/arith-v1", "finance/gen-v1"}
    assert ranked[0]["headroom"] >= ranked[1]["headroom"]
    for r in ranked:
        assert r["n"] == 6 and r["probe_steps"] == 2
        assert r["headroom"] == pytest.approx(r["probe"] - r["baseline"], abs=1e-5)
        lo, hi = r["headroom_ci95"]
        assert lo <= r["headroom"] + 1e-9 <= hi + 2e-9
    # each probe trained its own copy from the same base weights, and wrote its metrics
    for dom in ("math_arith-v1", "finance_gen-v1"):
        assert len((tmp_path / "w" / dom / "metrics.jsonl").read_text().splitlines()) == 2


def test_policy_path_refuses_remote_policies():
    with pytest.raises(ValueError, match="trainable"):
        policy_path("openai:http://x#m", load_config(), [])
    assert policy_path("hf:/some/dir", load_config(), []) == "/some/dir"
