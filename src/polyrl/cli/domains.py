"""``polyrl domains list|check``.

``list --json`` prints one object ``{"domains": [{"id", "family", "description",
"splits": {"train": size|null, "test": size|null}}], "skipped": {module: reason}}``
(size null = unbounded generator; a domain whose data is missing has
``"splits": null`` and an ``"error"``). ``check ID --json`` prints the
``CheckReport`` as one JSON object on the last line and exits 1 when not ok.
"""

from __future__ import annotations

import json
from typing import Any

import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from polyrl.cli import app
from polyrl.cli.common import fail, log
from polyrl.errors import ConfigError

domains_app = typer.Typer(help="List registered domains and check them.", no_args_is_help=True)
app.add_typer(domains_app, name="domains")


def _row(domain: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": domain.id,
        "family": domain.family,
        "description": domain.description,
        "multi_turn": domain.multi_turn,
    }
    try:
        row["splits"] = dict(domain.split_sizes())
    except ConfigError as e:  # missing data: list it, say why (its message names the file)
        row["splits"] = None
        row["error"] = str(e)
    except Exception as e:  # a bug of the domain: its type says more than the message
        row["splits"] = None
        row["error"] = f"{type(e).__name__}: {e}"
    return row


def _size(value: int | None) -> str:
    return "unbounded" if value is None else f"{value:,}"


def _sizes(splits: dict[str, int | None]) -> str:
    """``"unbounded"`` when both splits are, else ``"<train> / <test>"``."""
    train, test = splits.get("train"), splits.get("test")
    if train is None and test is None:
        return "unbounded"
    return f"{_size(train)} / {_size(test)}"


@domains_app.command("list")
def list_(json_: bool = typer.Option(False, "--json", help="One JSON object on stdout.")) -> None:
    """List registered domain ids with their split sizes and description.

    The family is the id's first part; --json has every field.
    """
    from polyrl.domains import list_domains, skipped

    rows = [_row(d) for d in list_domains()]
    skipped_sources = skipped()
    if json_:
        print(json.dumps({"domains": rows, "skipped": skipped_sources}))
        return
    # Reads at 80 columns: the family is the id's prefix (the registry enforces it),
    # train and test share a column, and why a domain is unavailable goes below.
    unavailable = [row for row in rows if row["splits"] is None]
    title = f"{len(rows)} domains"
    if unavailable:
        title += f" ({len(unavailable)} unavailable)"
    table = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
                  collapse_padding=True)
    table.add_column("id", no_wrap=True)
    table.add_column("train / test", no_wrap=True)
    table.add_column("description", ratio=1, overflow="fold")
    for row in rows:
        sizes = "[red]unavailable[/red]" if row["splits"] is None else _sizes(row["splits"])
        table.add_row(escape(row["id"]), sizes, escape(row["description"]))
    notes = Table.grid(padding=(0, 1))  # why not: a hanging indent under the label
    notes.add_column(no_wrap=True)
    notes.add_column(overflow="fold")  # a long path: broken, never cut short
    for row in unavailable:
        # errors hold paths and hints like set POLYRL_DATA_DIR: not Rich markup
        notes.add_row("[red]unavailable[/red]", escape(f"{row['id']}: {row['error']}"))
    for source, reason in skipped_sources.items():
        # reasons hold install hints like pip install 'polyrl[cad]': not Rich markup
        notes.add_row("[yellow]skipped[/yellow]", escape(f"{source}: {reason}"))
    console = Console(highlight=False)
    console.print(table)
    if notes.row_count:
        console.print()
        console.print(notes)


@domains_app.command("check")
def check(
    domain_id: str = typer.Argument(..., help="A registered domain id."),
    n: int = typer.Option(8, "--n", min=1, help="Tasks to check."),
    seed: int = typer.Option(0, "--seed", help="Seed of the task sample."),
    difficulty: str = typer.Option(
        "", "--difficulty", metavar="<levels>",
        help="Only these difficulty levels, e.g. 1 or 1-3 (default: the domain's own mix)."),
    json_: bool = typer.Option(False, "--json", help="One JSON object on the last line."),
) -> None:
    """Check a domain's contract on a sample of its tasks.

    The oracle scores 1.0. Empty output, garbage and the prompt echoed back score 0.0.

    Tasks and scores are deterministic. A procedural domain gives new tasks for a new seed.

    Train and test share no task. Binary domains set passed."""
    from polyrl.cli.eval import _difficulties
    from polyrl.domains import UnknownDomainError, check_domain, get_domain

    levels = _difficulties(difficulty)
    try:
        domain = get_domain(domain_id)
    except UnknownDomainError as e:
        fail(str(e), code=2)
    log(f"checking {domain.id} on {n} tasks")
    report = check_domain(domain, n=n, seed=seed, difficulty=levels)
    if json_:
        print(json.dumps(report.to_dict()))
    else:
        table = Table(title=f"domains check {report.id}")
        table.add_column("check")
        table.add_column("value")
        table.add_column("want")
        table.add_row("tasks", str(report.n), str(n))
        table.add_row("oracle mean reward", f"{report.oracle_mean:.4f}", "1.0")
        table.add_row("empty mean reward", f"{report.empty_mean:.4f}", "0.0")
        table.add_row("garbage mean reward", f"{report.garbage_mean:.4f}", "0.0")
        table.add_row("deterministic", str(report.deterministic), "True")
        table.add_row("train/test disjoint", str(report.disjoint), "True (None: one split)")
        table.add_row("seconds", f"{report.seconds:.2f}", "")
        console = Console()
        console.print(table)
        for problem in report.problems:
            console.print(f"[red]problem:[/red] {escape(problem)}", highlight=False)
        console.print("[green]ok[/green]" if report.ok else "[red]FAILED[/red]")
    if not report.ok:
        raise typer.Exit(1)
