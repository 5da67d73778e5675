"""``polyrl eval`` and ``polyrl headroom``."""

from __future__ import annotations

import typer

from polyrl.cli import app
from polyrl.cli.common import not_built


@app.command("eval")
def eval_(
    policy: str = typer.Option(..., "--policy", help="hf:PATH, openai:URL#MODEL, vllm:PATH, oracle, samples:FILE."),
    domains: str = typer.Option(..., "--domains", help="Comma-separated domain ids."),
    n: int = typer.Option(0, "--n", help="Tasks per domain (0 = all test tasks)."),
    json_: bool = typer.Option(False, "--json", help="Print one JSON object on the last line."),
) -> None:
    """Score a policy on held-out tasks: mean reward, pass@k and 95% intervals."""
    not_built("eval", "issue 9: the main job")


@app.command()
def headroom(
    policy: str = typer.Option(..., "--policy", help="Policy spec (see `polyrl eval`)."),
    domains: str = typer.Option(..., "--domains", help="Comma-separated domain ids."),
    probe_steps: int = typer.Option(20, "--probe-steps", help="RL steps of the probe per domain."),
) -> None:
    """Baseline vs a short RL probe per domain: which domains repay post-training."""
    not_built("headroom", "issue 9: the main job")
