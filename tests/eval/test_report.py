"""Tests of polyrl.eval.report on a fabricated run directory (files only)."""

from __future__ import annotations

import json
from pathlib import Path

from PIL import Image

from polyrl.eval.report import load_summary, report


def test_report_from_files_alone(run_dir: Path):
    out = report(run_dir)
    assert out == run_dir / "report.html"
    html = out.read_text()
    for name in ("baseline_vs_post", "reward", "curriculum", "throughput"):
        png = run_dir / "plots" / f"{name}.png"
        with Image.open(png) as im:
            assert im.format == "PNG" and im.size[0] > 300 and im.size[1] > 200
        assert f"plots/{name}.png" in html
    assert html.count("data:image/png;base64,") == 4
    assert "<b>2 of 3</b> domains improved" in html
    md = (run_dir / "summary.md").read_text()
    assert "math/arith-v1" in md


def test_summary_json_wins_over_rows(run_dir: Path):
    summary = load_summary(run_dir)
    summary["run_id"] = "from-summary-json"
    (run_dir / "summary.json").write_text(json.dumps(summary))
    assert "from-summary-json" in report(run_dir).read_text()


def test_partial_run_shows_baseline_only(run_dir: Path):
    (run_dir / "eval" / "post.jsonl").unlink()
    html = report(run_dir).read_text()
    assert "incomplete" in html
    assert (run_dir / "plots" / "baseline_vs_post.png").is_file()


def test_not_a_run_dir(tmp_path: Path):
    import pytest

    with pytest.raises(FileNotFoundError, match="no summary.json"):
        report(tmp_path)


def test_a_rebuilt_summary_resamples_with_the_runs_seed(run_dir: Path):
    """Without summary.json the summary is rebuilt from the rows: with the run's own
    ``run.seed`` (the pipeline's bootstrap seed), not 0, so a borderline interval
    cannot read differently from what the run printed."""
    from polyrl.config import dump_config, load_config
    from polyrl.eval.summary import compare, read_rows

    (run_dir / "config.yaml").write_text(dump_config(load_config(overrides=["run.seed=5"])))
    rows = [read_rows(run_dir / "eval" / f"{k}.jsonl") for k in ("baseline", "post")]
    assert load_summary(run_dir)["domains"] == compare(*rows, seed=5)
    assert load_summary(run_dir)["domains"] != compare(*rows, seed=0)
