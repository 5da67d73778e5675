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
