"""``polyrl report``: regenerate a run's report from its directory."""

from __future__ import annotations

from pathlib import Path

import typer

from polyrl.cli import app
from polyrl.cli.common import fail, log


@app.command()
def report(run_dir: Path = typer.Argument(..., help="A run directory.")) -> None:
    """Regenerate report.html, summary.md and the plots from a run directory alone.

    Prints the path of report.html on stdout.
    """
    if not run_dir.is_dir():  # before the imports below (torch, matplotlib: seconds)
        fail(f"{run_dir}: not a directory", code=2)
    if not (run_dir / "summary.json").is_file() and \
            not (run_dir / "eval" / "baseline.jsonl").is_file():  # as load_summary says, sooner
        fail(f"{run_dir}: no summary.json and no eval/baseline.jsonl: not a run directory "
             "whose baseline evaluation has finished", code=2)
    from polyrl.eval.report import report as write_report

    try:
        path = write_report(run_dir)
    except (FileNotFoundError, ValueError) as e:
        fail(str(e), code=2)  # a usage error, like a bad config
    log(f"report written: {path}")
    typer.echo(str(path))
