"""The polyrl command line: ``polyrl run / resume / eval / headroom / domains / sandbox / report``.

Each command lives in its own module and registers itself on ``app``.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import typer
import typer.core

from polyrl.cli.common import err_console, state
from polyrl.errors import ConfigError, PolyrlError


def _flags_show_no_type() -> None:
    """Show no value type for on/off flags in ``--help``.

    typer's Rich help (seen with typer 0.29.2, which vendors its own click) prints a
    type for every option, so a plain flag reads ``--json <bool>`` as if it took a
    value, and ``--help`` too. A flag takes no value: give it no type, as typer's plain
    help does (``TyperOption.get_help_record`` skips flags and counts). A no-op on
    typers without ``TyperOption.display_type_rich``.
    """
    option_cls = getattr(typer.core, "TyperOption", None)
    original = getattr(option_cls, "display_type_rich", None)
    if original is None or getattr(original, "_polyrl_flags_show_no_type", False):
        return

    def display_type_rich(self: Any, ctx: Any) -> str | None:
        if getattr(self, "is_flag", False) or getattr(self, "count", False):
            return None
        return original(self, ctx)

    display_type_rich._polyrl_flags_show_no_type = True  # type: ignore[attr-defined]
    option_cls.display_type_rich = display_type_rich  # type: ignore[union-attr]


_flags_show_no_type()

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
    if quiet:  # the libraries' own bars too (transformers' "Loading weights", hub
        # downloads): read from the environment when they are imported
        os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"


def _register() -> None:
    # each module registers its commands on import; this order is the order in
    # ``polyrl --help`` (commands first, then the groups domains and sandbox)
    for module in ("run", "eval", "report", "domains", "sandbox"):
        importlib.import_module(f"polyrl.cli.{module}")


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
    except PolyrlError as e:  # raised on purpose, with a message that says what and where:
        # one line, no traceback (POLYRL_TRACEBACK=1 shows it)
        if os.environ.get("POLYRL_TRACEBACK"):
            raise
        err_console.print(f"error: {e}", highlight=False, soft_wrap=True, markup=False)
        sys.exit(1)
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
