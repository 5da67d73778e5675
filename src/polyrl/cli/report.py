"""``polyrl report``: regenerate a run's report from its directory."""

from __future__ import annotations

from pathlib import Path

import typer

from polyrl.cli import app
from polyrl.cli.common import not_built


@app.command()
def report(run_dir: Path = typer.Argument(..., help="A run directory.")) -> None:
    """Regenerate report.html and its plots from a run directory alone."""
    not_built("report", "issue 9: the main job")
