"""``usage_daily``: the days' usage read from ``resource_intervals``, and the only writes of the table.

``ledger.daily`` decides which days to recompute and which entity-days to keep; this module holds
the statements, in one unit of work the caller opens.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import date, datetime

from tally_pipeline.core.registry import Meter
from tally_pipeline.core.usage import epoch_us
from tally_pipeline.store.base import UnitOfWork
from tally_pipeline.store.usage_sql import EVALUATE_ONCE, UsageSQL, compose, p


@dataclass(frozen=True, slots=True)
class DayWindow:
    """One UTC day: [start, end)."""

    day: date
    start: datetime
    end: datetime


@dataclass(frozen=True, slots=True)
class DayUsage:
    """An entity's usage on one day, in micro-units; ``unusable`` intervals (one named in ``example``) add nothing."""

    cloud: str
    project_id: str
    meter: str
    day: date
    unit: str
    micro: int
    unusable: int = 0
    example: str | None = None


def usage_by_day(
    uow: UnitOfWork, sql: UsageSQL, meters: Sequence[Meter], days: Sequence[DayWindow], through: datetime
) -> list[DayUsage]:
    """Each entity's usage on each of ``days``, counting up to ``through``: ``usage(day end) − usage(day start)``."""
    if not days:
        return []
    through_us = epoch_us(through)
    with ExitStack() as stack:
        days_rel = sql.rows(
            uow,
            stack,
            "dd",
            [("day", "date"), ("start_at", "timestamptz"), ("end_at", "timestamptz"), ("start_us", "bigint"), ("end_us", "bigint")],
            [
                [d.day for d in days],
                [d.start for d in days],
                [d.end for d in days],
                [min(epoch_us(d.start), through_us) for d in days],
                [min(epoch_us(d.end), through_us) for d in days],
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
            sql.meters(meters),
            " ON m.resource_type = i.resource_type WHERE i.start_at < ",
            p(through),
            EVALUATE_ONCE,
            ") x GROUP BY x.cloud, x.project_id, x.meter, x.day, x.unit",
        )
        rows = uow.fetchall(statement.sql, statement.params)
    return [
        DayUsage(cloud, project_id, meter, day if not isinstance(day, datetime) else day.date(), unit,
                 int(micro or 0), int(n_bad or 0), None if example is None else str(example))
        for cloud, project_id, meter, day, unit, micro, n_bad, example in rows
    ]


def delete_days(uow: UnitOfWork, first_day: date, last_day: date) -> None:
    """Remove every row of ``first_day``..``last_day`` (inclusive)."""
    uow.execute("DELETE FROM usage_daily WHERE day >= %s AND day <= %s", [first_day, last_day])


def insert_days(uow: UnitOfWork, sql: UsageSQL, rows: Sequence[DayUsage], computed_at: datetime) -> None:
    """Write ``rows`` (their days deleted first: a day is recomputed whole)."""
    if not rows:
        return
    with ExitStack() as stack:
        new = sql.rows(
            uow,
            stack,
            "r",
            [("cloud", "text"), ("project_id", "text"), ("meter", "text"), ("day", "date"), ("quantity", "micro"), ("unit", "text")],
            [
                [r.cloud for r in rows],
                [r.project_id for r in rows],
                [r.meter for r in rows],
                [r.day for r in rows],
                [str(r.micro) for r in rows],
                [r.unit for r in rows],
            ],
        )
        statement = compose(
            "INSERT INTO usage_daily (cloud, project_id, meter, day, quantity, unit, computed_at)"
            " SELECT r.cloud, r.project_id, r.meter, r.day, ",
            sql.micro_to_amount("r.quantity"),
            ", r.unit, ",
            p(computed_at),
            " FROM ",
            new,
        )
        uow.execute(statement.sql, statement.params)
