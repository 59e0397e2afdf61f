"""Usage commands: ``tally usage show`` (a project's month: its statement and the ledger's usage, the
numbers the API answers) and ``tally usage state`` (close a month by hand, as the Dagster asset does)."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from typing import Any

import click

from tally_pipeline.commands._options import with_runtime
from tally_pipeline.core.statements import month_bounds, parse_month
from tally_pipeline.core.timeutil import TimestampError, format_rfc3339, parse_rfc3339
from tally_pipeline.runtime import Runtime


class _Month(click.ParamType[date]):
    name = "YYYY-MM"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> date:
        if isinstance(value, date):
            return value
        try:
            return parse_month(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


def _instant(value: str | None) -> datetime:
    if value is None:
        return datetime.now(UTC)
    try:
        return parse_rfc3339(value)
    except TimestampError as exc:
        raise click.BadParameter(str(exc), param_hint="'--now'") from None


MONTH = _Month()


@click.command("show")
@click.option("--cloud", required=True, help="The cloud.")
@click.option("--project", "project_id", required=True, help="The project.")
@click.option("--month", required=True, type=MONTH, help="The UTC month, YYYY-MM.")
@click.option("--versions", is_flag=True, help="Every version of the statement, not only the latest.")
@click.option("--now", help="The instant pending usage is counted at (RFC 3339; default: now).")
@with_runtime
def show(rt: Runtime, cloud: str, project_id: str, month: date, versions: bool, now: str | None) -> None:
    """Show a project's month: its statement and the ledger's usage, as JSON.

    ``statement`` is what GET /v1/statements/CLOUD/MONTH?project_id=P answers, ``ledger`` what
    GET /v1/usage?cloud=C&project_id=P&group=month&from=..&to=..&include=pending answers."""
    from tally_pipeline.services.statements import read_statement
    from tally_pipeline.services.usage import quantity, usage_page
    from tally_pipeline.store.ledger_reads import Scope

    statement = read_statement(rt.store, cloud, month, project_id=project_id, versions=versions)
    start, end = month_bounds(month)
    settings = rt.config.ledger
    rows, after = [], None
    while True:
        page = usage_page(rt.store, rt.registry, now=_instant(now), ingest_lag=settings.ingest_lag,
                          window_days=settings.window_days, scope=Scope(frozenset({cloud}), project_id), group="month",
                          start=start, end=end, include_pending=True, after=after, limit=1000)
        rows += page.rows
        if page.next_key is None:
            break
        after = page.next_key
    click.echo(json.dumps({
        "cloud": cloud,
        "project_id": project_id,
        "month": statement.to_dict()["month"],
        "statement": statement.to_dict(),
        "ledger": {
            "as_of": format_rfc3339(page.as_of),
            "posted_to": None if page.posted_to is None else format_rfc3339(page.posted_to),
            "from": format_rfc3339(start),
            "to": format_rfc3339(end),
            "usage": [{"meter": r.meter, "period": r.period, "account": r.account, "quantity": quantity(r),
                       "unit": r.unit, "provisional": r.provisional,
                       "posted_to": None if r.posted_to is None else format_rfc3339(r.posted_to)} for r in rows],
        },
    }, indent=2))


@click.command("state")
@click.option("--month", required=True, type=MONTH, help="The UTC month, YYYY-MM.")
@click.option("--cloud", "clouds", multiple=True, help="A cloud (repeatable; default: every cloud with usage).")
@click.option("--now", help="The instant the month is closed at (RFC 3339; default: now).")
@with_runtime
def state(rt: Runtime, month: date, clouds: tuple[str, ...], now: str | None) -> None:
    """State a month, or re-state its late usage, cloud by cloud.

    As the usage_statements asset does; prints each cloud's outcome. Exit 1 when a cloud waits (its
    reasons are printed)."""
    from tally_pipeline.services.statements import close_month, clouds_to_state

    at = _instant(now)
    outcomes = [close_month(rt.store, rt.registry, cloud=cloud, month=month, now=at,
                            ingest_lag=rt.config.ledger.ingest_lag).to_dict()
                for cloud in (clouds or clouds_to_state(rt.store))]
    click.echo(json.dumps({"month": f"{month:%Y-%m}", "clouds": outcomes}, indent=2))
    if any(o["status"] == "waiting" for o in outcomes):
        raise SystemExit(1)
