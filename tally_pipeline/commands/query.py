"""Commands for analysts and operators: history, inventory, and the projection itself."""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime
from typing import Any

import click

from tally_pipeline.commands._options import with_runtime
from tally_pipeline.core.timeutil import TimestampError, format_rfc3339, parse_rfc3339
from tally_pipeline.runtime import Runtime
from tally_pipeline.services import projection, queries


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return format_rfc3339(value)
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    return "" if value is None else value


def _emit(rows: list[dict[str, Any]], columns: list[str], fmt: str) -> None:
    if fmt == "json":
        click.echo(json.dumps(rows, indent=2, default=_plain))
        return
    if fmt == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        writer.writerow(columns)
        for row in rows:
            writer.writerow([_plain(row.get(c)) for c in columns])
        click.echo(buffer.getvalue(), nl=False)
        return
    table = [[str(_plain(row.get(c))) for c in columns] for row in rows]
    widths = [max([len(c), *(len(r[i]) for r in table)]) for i, c in enumerate(columns)]
    click.echo("  ".join(c.ljust(w) for c, w in zip(columns, widths)))
    for r in table:
        click.echo("  ".join(v.ljust(w) for v, w in zip(r, widths)))


FORMAT = click.option("--format", "fmt", type=click.Choice(["table", "json", "csv"]), default="table", show_default=True)


@click.command("history")
@click.argument("cloud")
@click.argument("resource_type")
@click.argument("resource_id")
@FORMAT
@with_runtime
def history(rt: Runtime, cloud: str, resource_type: str, resource_id: str, fmt: str) -> None:
    """A resource's events in fold order, then its lifecycle."""
    events = queries.history(rt.store, cloud, resource_type, resource_id)
    if events is None:
        raise click.ClickException(f"no events for {resource_type} {resource_id!r} in cloud {cloud!r}")
    intervals = queries.lifecycle(rt.store, cloud, resource_type, resource_id) or []
    if fmt == "json":
        click.echo(json.dumps({"events": events, "intervals": intervals}, indent=2, default=_plain))
        return
    for row in events:
        row["size"] = (row.get("payload") or {}).get("size")
    _emit(events, ["occurred_at", "verb", "event_type", "source", "project_id", "size", "event_id"], fmt)
    if fmt == "table":
        click.echo("")
        click.echo("lifecycle:")
    _emit(intervals, ["lifecycle", "start", "end", "project_id", "size"], fmt)


@click.command("inventory")
@click.option("--cloud")
@click.option("--resource-type")
@click.option("--project", "project_id")
@click.option("--as-of", help="RFC 3339 instant: the inventory as it was then.")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="At most this many rows (default: all).")
@FORMAT
@with_runtime
def inventory(rt: Runtime, cloud: str | None, resource_type: str | None, project_id: str | None,
              as_of: str | None, limit: int | None, fmt: str) -> None:
    """Live resources (now, or --as-of an instant), optionally filtered."""
    try:
        instant = parse_rfc3339(as_of) if as_of else None
    except TimestampError as exc:
        raise click.BadParameter(str(exc), param_hint="--as-of") from None
    rows: list[dict[str, Any]] = []
    after = None
    with rt.store.session():
        while limit is None or len(rows) < limit:
            page = queries.inventory(rt.store, cloud=cloud, resource_type=resource_type, project_id=project_id,
                                     as_of=instant, after=after, limit=1000)
            rows.extend(page.resources)
            if page.next_key is None:
                break
            after = page.next_key
    if limit is not None:
        rows = rows[:limit]
    _emit(rows, ["cloud", "resource_type", "resource_id", "project_id", "size", "status", "created_at"], fmt)
    if fmt == "table":
        click.echo(f"({len(rows)} resources)", err=True)


@click.group("projection")
def projection_group() -> None:
    """current_resources and resource_intervals."""


@projection_group.command("refresh")
@with_runtime
def refresh(rt: Runtime) -> None:
    """Fold the events stored since the last refresh."""
    click.echo(json.dumps(projection.refresh(rt.store).as_json()))


@projection_group.command("rebuild")
@with_runtime
def rebuild(rt: Runtime) -> None:
    """Re-fold every resource from its full history (gives the same tables as incremental refreshes)."""
    click.echo(json.dumps(projection.rebuild(rt.store).as_json()))
