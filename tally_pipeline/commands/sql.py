"""``tally sql``: read-only SQL on the store, one query or a small shell, with no DuckDB CLI to install."""

from __future__ import annotations

import sys

import click

from tally_pipeline.commands._options import with_runtime
from tally_pipeline.commands.query import FORMAT, _emit
from tally_pipeline.runtime import Runtime

PROMPT = "tally> "
MORE = "  ...> "


def _run(url: str, sql: str, fmt: str, wait: float) -> bool:
    """Run one piece of SQL and print its rows; False (the error printed) when it failed."""
    from tally_pipeline.store import StoreError
    from tally_pipeline.store.read_only import run_read_only

    try:
        result = run_read_only(url, sql, wait_s=wait)
    except StoreError as exc:
        click.echo(f"error: {exc}", err=True)
        return False
    if result.columns:
        _emit([dict(zip(result.columns, row, strict=True)) for row in result.rows], result.columns, fmt)
    return True


def _shell(url: str, fmt: str, wait: float) -> None:
    """Statements ended by ``;``, each run as it is complete; ``.quit`` or end of input leaves."""
    try:
        import readline  # noqa: F401 - line editing and history for input(), where the platform has it
    except ImportError:
        pass
    click.echo(f"read-only SQL on {url.split('@')[-1]}; end a statement with ';', leave with .quit or Ctrl-D", err=True)
    pending: list[str] = []
    while True:
        try:
            line = input(MORE if pending else PROMPT)
        except EOFError:
            click.echo(err=True)
            break
        if not pending and line.strip() in (".quit", ".exit", "\\q"):
            break
        pending.append(line)
        if line.rstrip().endswith(";"):
            _run(url, "\n".join(pending), fmt, wait)
            pending = []
    if any(p.strip() for p in pending):
        _run(url, "\n".join(pending), fmt, wait)


@click.command("sql")
@click.argument("query", required=False)
@FORMAT
@click.option("--wait", type=click.FloatRange(min=0), default=30.0, show_default=True,
              help="Seconds to wait while another process holds an embedded DuckDB file.")
@with_runtime
def sql(rt: Runtime, query: str | None, fmt: str, wait: float) -> None:
    """Read-only SQL on the store (the tables of docs/data-dictionary.md).

    With QUERY, run it and print the last statement's rows. Without, read statements from standard
    input: a shell (end each with ';', leave with .quit) on a terminal, a script otherwise. An embedded
    DuckDB file is opened read-only for each statement and closed at once, so an idle shell never
    keeps the pipeline or the API waiting; PostgreSQL runs each in a read-only transaction.
    Exit 1 when a statement failed.
    """
    url = rt.config.database
    if query is not None:
        ok = _run(url, query, fmt, wait)
    elif sys.stdin.isatty():
        _shell(url, fmt, wait)
        ok = True
    else:
        ok = _run(url, sys.stdin.read(), fmt, wait)
    if not ok:
        raise SystemExit(1)
