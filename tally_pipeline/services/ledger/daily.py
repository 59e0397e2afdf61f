"""``usage_daily``: usage per (cloud, project, meter, UTC day), recomputed a day range at a time.

An interval's usage on day D is ``usage(min(end of D, through)) − usage(start of D)`` with the
meters' per-interval rule, so days telescope: an entity's days through D add up exactly to its
cumulative usage through the end of D (the quantity the ledger posts). Recomputing a range
deletes its days and inserts them again in one transaction, so it is idempotent (Dagster's daily
partitions and backfills call it). Entity-days whose history holds an unusable size are left out
and reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from tally_pipeline.core.errors import InputError
from tally_pipeline.core.registry import SizeSchemaRegistry
from tally_pipeline.core.timeutil import format_rfc3339, to_utc
from tally_pipeline.store import usage_daily
from tally_pipeline.store.base import Store, UnitOfWork

_DAY = timedelta(days=1)


class DayRangeError(InputError, ValueError):
    """A day range whose last day comes before its first. ``first`` and ``last`` name the two days as
    the caller gave them (the command line says ``--from`` and ``--to``)."""

    def __init__(self, first_day: date, last_day: date, *, first: str = "the first day", last: str = "the last day"):
        super().__init__(f"{first} {first_day} is after {last} {last_day}: give {first} on or before {last}")
        self.first_day = first_day
        self.last_day = last_day


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
        raise DayRangeError(first_day, last_day)
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
    usage_daily.delete_days(uow, result.first_day, result.last_day)
    sql = store.usage_sql()
    windows = [usage_daily.DayWindow(d, day_start(d), day_start(d) + _DAY) for d in days]
    keep = []
    for row in usage_daily.usage_by_day(uow, sql, registry.meters(), windows, result.through):
        if row.unusable:
            result.skipped.append(SkippedDay(row.cloud, row.project_id, row.meter, row.day, f"bad_size: {row.example}"))
        elif row.micro:
            keep.append(row)
    result.skipped.sort(key=lambda s: (s.cloud, s.project_id, s.meter, s.day))
    usage_daily.insert_days(uow, sql, keep, datetime.now(UTC))
    result.rows = len(keep)
