"""Ledger commands: ``tally post-usage``, ``tally ledger verify``, ``tally usage daily``, ``tally bench post``."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta
from typing import Any

import click

from tally_pipeline.commands._bench_report import print_report
from tally_pipeline.commands._options import with_runtime
from tally_pipeline.core.timeutil import TimestampError, format_rfc3339, parse_rfc3339
from tally_pipeline.redaction import redact
from tally_pipeline.runtime import Runtime


class _Instant(click.ParamType[datetime]):
    name = "RFC3339"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> datetime:
        if isinstance(value, datetime):
            return value
        try:
            return parse_rfc3339(value)
        except TimestampError as exc:
            self.fail(str(exc), param, ctx)


class _Day(click.ParamType[date]):
    name = "YYYY-MM-DD"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> date:
        if isinstance(value, date):
            return value
        try:
            return date.fromisoformat(value)
        except ValueError:
            self.fail(f"{value!r} is not a day (YYYY-MM-DD)", param, ctx)


INSTANT, DAY = _Instant(), _Day()

#: How far ``post-usage --now`` may lie ahead of this machine's clock: clock skew between hosts,
#: not a way to post usage that has not happened (the checkpoints would then be ahead of every
#: later cycle's clamp, and those entities skipped as non_monotonic until the clock caught up).
FUTURE_TOLERANCE = timedelta(minutes=5)


def _echo(data: Any) -> None:
    click.echo(json.dumps(data, indent=2))


def _fold_first(rt: Runtime, doing: str) -> dict[str, Any]:
    """Fold the pending events, as every reader does, before the ledger reads the lifecycles; say what it folded.

    Usage is read from ``resource_intervals``: without this, a poster scheduled on its own (cron, a
    CronJob) after ``tally ingest`` would post nothing and exit 0. A fold that fails stops the command
    before it reads anything: it never posts or verifies from a stale projection.
    """
    from tally_pipeline.services.projection import refresh

    try:
        result = refresh(rt.store)
    except Exception as exc:  # noqa: BLE001 - whatever stopped the fold, nothing may be posted after it
        raise click.ClickException(
            f"cannot fold the pending events into the projection, so nothing was {doing}: "
            f"{redact(f'{type(exc).__name__}: {exc}')}"
        ) from None
    return {"events": result.events, "resources": result.resources, "watermark": result.watermark}


@click.command("post-usage")
@click.option("--now", type=INSTANT, help="The cycle's instant (default: the current time). Clamp = now − ingest_lag. "
              "At most 5 minutes in the future.")
@click.option("--batch-size", type=click.IntRange(min=1), default=None, help="Entities per transaction.")
@click.option("--workers", type=click.IntRange(min=1), default=None, help="Transactions at a time (default: 2 on Postgres, 1 on DuckDB).")
@click.option("--list-entities", is_flag=True, help="Also list every posted entity.")
@with_runtime
def post_usage_command(
    rt: Runtime, now: datetime | None, batch_size: int | None, workers: int | None, list_entities: bool
) -> None:
    """Run one checkpoint-delta posting cycle; print its result.

    Pending events are folded first (the result's ``folded``). Exit 1 when the fold fails (nothing is
    posted), or when an entity was skipped or posted without some of its intervals; exit 2 when --now
    lies in the future.
    """
    from tally_pipeline.services.ledger.poster import DEFAULT_BATCH_SIZE, post_usage

    wall = datetime.now(UTC)
    if now is not None and now > wall + FUTURE_TOLERANCE:
        raise click.BadParameter(
            f"{format_rfc3339(now)} is in the future (this machine's clock reads {format_rfc3339(wall)}; "
            f"tolerance {int(FUTURE_TOLERANCE.total_seconds())} s): usage that has not happened cannot be posted",
            param_hint="'--now'",
        )
    folded = _fold_first(rt, "posted")
    result = post_usage(
        rt.store,
        rt.registry,
        now=now or wall,
        ingest_lag=rt.config.ledger.ingest_lag,
        window_days=rt.config.ledger.window_days,
        batch_size=batch_size or DEFAULT_BATCH_SIZE,
        workers=workers,
    )
    _echo({"folded": folded, **result.to_dict(entities=list_entities)})
    if not result.clean:
        raise SystemExit(1)


@click.command("verify")
@click.option("--ledger-only", is_flag=True, help="Ignore history changed since the last cycle; check the ledger's own sums.")
@with_runtime
def verify_command(rt: Runtime, ledger_only: bool) -> None:
    """Recompute every entity's usage through its checkpoint and compare with its postings. Exit 1 on any difference.

    Pending events are folded first (the report's ``folded``); exit 1 when that fails (nothing is verified).
    """
    from tally_pipeline.services.ledger.verify import verify

    folded = _fold_first(rt, "verified")
    report = verify(rt.store, rt.registry, include_history=not ledger_only)
    _echo({"folded": folded, **report.to_dict()})
    if not report.ok:
        raise SystemExit(1)


@click.command("daily")
@click.option("--day", "day", type=DAY, help="Recompute this UTC day.")
@click.option("--from", "first", type=DAY, help="First day of a range (with --to).")
@click.option("--to", "last", type=DAY, help="Last day of a range, inclusive.")
@click.option("--through", type=INSTANT, help="Count usage up to this instant (default: now).")
@with_runtime
def daily_command(rt: Runtime, day: date | None, first: date | None, last: date | None, through: datetime | None) -> None:
    """Recompute usage_daily for a day or a range of days (delete them, insert them again)."""
    from tally_pipeline.services.ledger.daily import DayRangeError, recompute_usage_daily

    if day is not None and (first is not None or last is not None):
        raise click.UsageError("give --day, or --from and --to, not both")
    if day is None and (first is None or last is None):
        raise click.UsageError("give --day D, or --from D1 --to D2")
    start, end = (day, day) if day is not None else (first, last)
    assert start is not None and end is not None  # the usage errors above
    if end < start:
        # named as the user gave them; the command line prints it as one line (cli.main)
        raise DayRangeError(start, end, first="--from", last="--to")
    _echo(recompute_usage_daily(rt.store, rt.registry, start, end, through=through).to_dict())


@click.command("post")
@click.option("--entities", type=click.IntRange(min=3), default=100_000, show_default=True)
@click.option("--naive-sample", type=click.IntRange(min=1), default=None,
              help="Entities the naive one-transaction-per-entity poster is timed on (default 10,000; 200 on DuckDB).")
@click.option("--batch-size", type=click.IntRange(min=1), default=None, help="Entities per transaction.")
@click.option("--workers", type=click.IntRange(min=1), default=None, help="Transactions at a time (default: 2 on Postgres).")
@click.option("--steady-cycles", type=click.IntRange(min=1), default=3, show_default=True,
              help="Steady cycles timed, each with its own write floor; the fastest is the headline.")
@click.option("--keep", is_flag=True, help="Keep the benchmark's schema (Postgres) instead of dropping it.")
@with_runtime
def bench_post_command(
    rt: Runtime, entities: int, naive_sample: int | None, batch_size: int | None, workers: int | None,
    steady_cycles: int, keep: bool,
) -> None:
    """Time one posting cycle over N entities, set-based and naive, in a throw-away schema; print JSON."""
    from tally_pipeline.bench.post import bench_post
    from tally_pipeline.services.ledger.poster import DEFAULT_BATCH_SIZE

    figures = bench_post(
        rt.config.database,
        entities,
        naive_sample=naive_sample,
        batch_size=batch_size or DEFAULT_BATCH_SIZE,
        workers=workers,
        steady_cycles=steady_cycles,
        keep=keep,
    )
    print_report(figures)
