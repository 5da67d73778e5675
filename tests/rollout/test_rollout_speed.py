"""Smoke run of benchmarks/rollout_speed.py --quick: the JSON line and its correctness flags."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "rollout_speed.py"


@pytest.mark.slow
def test_rollout_speed_quick_json() -> None:
    out = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--json"], capture_output=True,
                         text=True, timeout=600, check=True)
    fig = json.loads(out.stdout.strip().splitlines()[-1])
    for key in ("group_vs_plain", "greedy_equal", "spec_speedup", "spec_acceptance"):
        assert key in fig
    assert fig["greedy_equal"] is True and fig["spec_greedy_equal"] is True
    assert fig["group_vs_plain"] > 0 and 0 <= fig["spec_acceptance"] <= 1
    assert fig["kvq_memory_ratio"] < 0.35
