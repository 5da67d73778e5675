"""``polyrl sandbox exec|doctor``."""

from __future__ import annotations

import typer

from polyrl.cli import app
from polyrl.cli.common import not_built

sandbox_app = typer.Typer(help="Run commands in the sandbox; probe the host.", no_args_is_help=True)
app.add_typer(sandbox_app, name="sandbox")


@sandbox_app.command()
def doctor() -> None:
    """Probe which sandbox backends work on this host, and why not."""
    not_built("sandbox doctor", "issue 3: Sandbox")


@sandbox_app.command("exec", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def exec_(ctx: typer.Context) -> None:
    """Run ARGV in the sandbox and print its ExecResult."""
    not_built("sandbox exec", "issue 3: Sandbox")
