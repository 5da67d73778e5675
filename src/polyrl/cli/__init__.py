"""The polyrl command line: ``polyrl run / resume / eval / headroom / domains / sandbox / report``.

Each command lives in its own module and registers itself on ``app``.
"""

from __future__ import annotations

import sys

import typer

from polyrl.cli.common import err_console, state
from polyrl.errors import ConfigError

app = typer.Typer(
    name="polyrl",
    help="RL post-training of language models across many verifiable domains.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root(
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars or logs."),
) -> None:
    """RL post-training of language models across many verifiable domains."""
    state.quiet = quiet


def _register() -> None:
    from polyrl.cli import domains, report, run, sandbox  # noqa: F401
    from polyrl.cli import eval as eval_cmd  # noqa: F401


def main() -> None:
    """Console entry point: runs the app; a ``ConfigError`` becomes one line and exit 2."""
    _register()
    try:
        rc = app(standalone_mode=False)
        if isinstance(rc, int) and not isinstance(rc, bool) and rc != 0:
            sys.exit(rc)  # a typer.Exit(code) raised inside a command (non-standalone click)
    except ConfigError as e:
        err_console.print(f"{e}", highlight=False, soft_wrap=True, markup=False)
        sys.exit(2)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except typer.Abort:
        err_console.print("aborted")
        sys.exit(130)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)
    except Exception as e:  # click usage errors
        import click

        if isinstance(e, click.ClickException):
            e.show()
            sys.exit(e.exit_code)
        raise
