"""Shared CLI plumbing: stderr console, quiet mode, progress bars, clean failures.

Logs and progress go to stderr; results go to stdout, so ``polyrl ... --json | jq``
works.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

err_console = Console(stderr=True, soft_wrap=True)
"""Console for logs and progress (stderr)."""


class _State:
    quiet: bool = False


state = _State()


def log(message: str) -> None:
    """Print a log line to stderr unless ``--quiet``."""
    if not state.quiet:
        err_console.print(message, markup=False)  # verbatim: paths, hints like [cad]


def print_error(message: str) -> None:
    """Print one line ``error: <message>`` to stderr: the one form of every refusal
    (``fail``, and ``cli.main`` for a ``ConfigError``, another ``PolyrlError`` and a
    usage error); ``message`` is shown verbatim (paths, ``[cad]``: not Rich markup)."""
    err_console.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)


def fail(message: str, code: int = 1) -> NoReturn:
    """Print one line ``error: <message>`` to stderr and exit with ``code`` (2: a usage
    error, the user's to fix; 1: the work failed)."""
    print_error(message)
    raise typer.Exit(code)


@contextlib.contextmanager
def progress(description: str, total: float | None) -> Iterator[Progress | None]:
    """A rich progress bar on stderr; yields None under ``--quiet`` or no TTY-less log.

    Usage::

        with progress("scoring", total=n) as bar:
            task = bar.add_task(...) if bar else None
    """
    if state.quiet:
        yield None
        return
    bar = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err_console,
        transient=False,
    )
    with bar:
        yield bar


def not_built(command: str, issue: str) -> NoReturn:
    """Say plainly that ``command`` is not built yet (exit code 3)."""
    err_console.print(f"polyrl {command}: not built yet ({issue}).")
    sys.stderr.flush()
    raise typer.Exit(3)
