"""``polyrl domains list|check``."""

from __future__ import annotations

import typer

from polyrl.cli import app
from polyrl.cli.common import not_built

domains_app = typer.Typer(help="List registered domains and check them.", no_args_is_help=True)
app.add_typer(domains_app, name="domains")


@domains_app.command("list")
def list_(json_: bool = typer.Option(False, "--json", help="One JSON object on stdout.")) -> None:
    """List registered domain ids with their family and split sizes."""
    not_built("domains list", "issue 4: Domains I")


@domains_app.command("check")
def check(
    domain_id: str = typer.Argument(..., help="A registered domain id."),
    n: int = typer.Option(8, "--n", help="Tasks to check."),
    json_: bool = typer.Option(False, "--json", help="One JSON object on the last line."),
) -> None:
    """Oracle scores 1.0, empty scores 0.0, scoring is deterministic."""
    not_built("domains check", "issue 4: Domains I")
