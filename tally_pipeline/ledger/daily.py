"""``usage_daily``: usage per (cloud, project, meter, UTC day), recomputed a day range at a time.

An interval's usage on day D is ``usage(min(end of D, through)) − usage(start of D)`` with the
meters' per-interval rule, so days telescope: an entity's days through D add up exactly to its
cumulative usage through the end of D (the quantity the ledger posts). Recomputing a range
deletes its days and inserts them again in one transaction, so it is idempotent (Dagster's daily
partitions and backfills call it). Entity-days whose history holds an unusable size are left out
and reported.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from tally_pipeline.core.registry import SizeSchemaRegistry
from tally_pipeline.core.timeutil import format_rfc3339, to_utc
from tally_pipeline.core.usage import epoch_us
from tally_pipeline.ledger.usage_sql import EVALUATE_ONCE, UsageSQL, compose, p
from tally_pipeline.store.base import Store, UnitOfWork

_DAY = timedelta(days=1)


@dataclass(frozen=True, slots=True)
class SkippedDay:
    cloud: str
    project_id: str
    meter: str
    day: date
    reason: str


@dataclass
class DailyResult:
    first_day: date
    last_day: date
    through: datetime
    rows: int = 0
    skipped: list[SkippedDay] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "first_day": self.first_day.isoformat(),
            "last_day": self.last_day.isoformat(),
            "through": format_rfc3339(self.through),
            "rows": self.rows,
            "skipped": [
                {"cloud": s.cloud, "project_id": s.project_id, "meter": s.meter, "day": s.day.isoformat(), "reason": s.reason}
                for s in self.skipped
            ],
        }


def day_start(day: date) -> datetime:
    return datetime.combine(day, time(0), tzinfo=UTC)


def recompute_usage_daily(
    store: Store,
    registry: SizeSchemaRegistry,
    first_day: date,
    last_day: date | None = None,
    *,
    through: datetime | None = None,
) -> DailyResult:
    """Replace ``usage_daily`` rows for ``first_day``..``last_day`` (inclusive, UTC days).

    Usage counts up to ``through`` (default: now), so today's row is the day so far and later
    days are empty.
    """
    last_day = first_day if last_day is None else last_day
    if last_day < first_day:
        raise ValueError(f"last day {last_day} is before first day {first_day}")
    through = to_utc(through) if through is not None else datetime.now(UTC)
    result = DailyResult(first_day, last_day, through)
    days = []
    day = first_day
    while day <= last_day and day_start(day) < through:
        days.append(day)
        day += _DAY
    store.run(lambda uow: _recompute(uow, store, registry, result, days))
    return result


def _recompute(uow: UnitOfWork, store: Store, registry: SizeSchemaRegistry, result: DailyResult, days: list[date]) -> None:
    result.rows, result.skipped = 0, []
    uow.execute("DELETE FROM usage_daily WHERE day >= %s AND day <= %s", [result.first_day, result.last_day])
    if not days:
        return
    sql = UsageSQL(store.dialect)
    through_us = epoch_us(result.through)
    with ExitStack() as stack:
        days_rel = sql.rows(
            uow,
            stack,
            "dd",
            [("day", "date"), ("start_at", "timestamptz"), ("end_at", "timestamptz"), ("start_us", "bigint"), ("end_us", "bigint")],
            [
                days,
                [day_start(d) for d in days],
                [day_start(d) + _DAY for d in days],
                [min(epoch_us(day_start(d)), through_us) for d in days],
                [min(epoch_us(day_start(d) + _DAY), through_us) for d in days],
            ],
        )
        statement = compose(
            "SELECT x.cloud, x.project_id, x.meter, x.day, x.unit, sum(",
            sql.usage("x.t_end"),
            ") - sum(",
            sql.usage("x.t_start"),
            "), count(*) - count(x.v), min(CASE WHEN x.v IS NULL THEN ",
            sql.bad_value(),
            " END) FROM (SELECT i.cloud, i.project_id, m.meter, m.unit, dd.day, dd.start_us AS t_start,"
            " dd.end_us AS t_end, ",
            sql.interval_columns(),
            " FROM ",
            days_rel,
            " JOIN resource_intervals i ON i.start_at < dd.end_at AND (i.end_at IS NULL OR i.end_at > dd.start_at)"
            " JOIN ",
            sql.meters(registry.meters()),
            " ON m.resource_type = i.resource_type WHERE i.start_at < ",
            p(result.through),
            EVALUATE_ONCE,
            ") x GROUP BY x.cloud, x.project_id, x.meter, x.day, x.unit",
        )
        rows = uow.fetchall(statement.sql, statement.params)
    keep = []
    for cloud, project_id, meter, day, unit, micro, n_bad, example in rows:
        day = day if isinstance(day, date) and not isinstance(day, datetime) else day.date()
        if n_bad:
            result.skipped.append(SkippedDay(cloud, project_id, meter, day, f"bad_size: {example}"))
        elif micro:
            keep.append((cloud, project_id, meter, day, str(int(micro)), unit))
    result.skipped.sort(key=lambda s: (s.cloud, s.project_id, s.meter, s.day))
    if not keep:
        return
    with ExitStack() as stack:
        new = sql.rows(
            uow,
            stack,
            "r",
            [("cloud", "text"), ("project_id", "text"), ("meter", "text"), ("day", "date"), ("quantity", "micro"), ("unit", "text")],
            [list(col) for col in zip(*keep, strict=True)],
        )
        statement = compose(
            "INSERT INTO usage_daily (cloud, project_id, meter, day, quantity, unit, computed_at)"
            " SELECT r.cloud, r.project_id, r.meter, r.day, ",
            sql.micro_to_amount("r.quantity"),
            ", r.unit, ",
            p(datetime.now(UTC)),
            " FROM ",
            new,
        )
        uow.execute(statement.sql, statement.params)
    result.rows = len(keep)
