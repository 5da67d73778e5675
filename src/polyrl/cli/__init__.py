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
    except Exception as e:
        if _is_usage_error(e):  # unknown option, missing argument, a group without command
            e.show()  # type: ignore[attr-defined]
            sys.exit(e.exit_code)  # type: ignore[attr-defined]
        raise


def _is_usage_error(e: Exception) -> bool:
    """True for click's own exceptions (usage errors and the like), whether typer uses
    the ``click`` package or its vendored copy (typer >= 0.20): they print themselves
    with ``show()`` and carry an ``exit_code``."""
    classes: list[type] = []
    try:
        from typer._click.exceptions import ClickException as vendored
        classes.append(vendored)
    except ImportError:
        pass
    try:
        import click
        classes.append(click.ClickException)
    except ImportError:
        pass
    return isinstance(e, tuple(classes))
