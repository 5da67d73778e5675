"""``polyrl run`` and ``polyrl resume``: the main job."""

from __future__ import annotations

from pathlib import Path

import typer

from polyrl.cli import app
from polyrl.cli.common import not_built
from polyrl.config import dump_config, load_config


@app.command()
def run(
    config: Path | None = typer.Argument(
        None, help="YAML config; omitted = the embedded quickstart."
    ),
    set_: list[str] = typer.Option(
        [], "--set", help="Override a key: --set train.lr=1e-4 (repeatable)."
    ),
    print_config: bool = typer.Option(
        False, "--print-config", help="Print the fully resolved config and exit."
    ),
) -> None:
    """Post-train a model with RL across domains (baseline eval, GRPO, eval, report)."""
    cfg = load_config(config, set_)
    if print_config:
        typer.echo(dump_config(cfg), nl=False)
        return
    not_built("run", "issue 9: the main job")


@app.command()
def resume(
    run_dir: Path = typer.Argument(..., help="A run directory, e.g. runs/quickstart-20261130-101500."),
) -> None:
    """Resume an interrupted run from its last checkpoint and durable job state."""
    not_built("resume", "issue 9: the main job")
