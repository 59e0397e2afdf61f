"""Monthly statements: when a month of a cloud is closed, and what a (re-)statement holds. No I/O.

A statement says, per (cloud, project, meter), how much was **used in** a UTC month: the usage dated
in ``[month start, next month start)`` as the history stands, ``U(end) − U(start)`` with the ledger's
meter rule (``core.usage``), so the months of an entity add up exactly to its cumulative usage.

A month is stated only once it is **closed** for its cloud (``closing_waits`` says what it waits for):
the month has ended by the ingest lag (no event of it is still in flight by the ledger's own rule),
the ledger is posted past the month's end and verified, and nothing is deferred (no discrepancy in the
cloud that the next cycle or a correction would change, no reconciliation deferral open).

Late usage for a closed month is **re-stated**, never overwritten: ``restate`` gives each entity whose
amount changed a new version carrying the previous amount and the difference.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from tally_pipeline.core.errors import InputError
from tally_pipeline.core.timeutil import format_rfc3339, to_utc

_MONTH = re.compile(r"^(\d{4})-(0[1-9]|1[0-2])$")

#: An entity of a statement: (cloud, project_id, meter).
StatementKey = tuple[str, str, str]


class MonthError(InputError, ValueError):
    """A month that is not written ``YYYY-MM``."""


def parse_month(text: str) -> date:
    """``YYYY-MM`` → the month's first day; anything else is a ``MonthError`` naming the value."""
    found = _MONTH.match(text)
    if found is None:
        raise MonthError(f"month must be YYYY-MM, not {text!r} (e.g. 2026-12)")
    return date(int(found.group(1)), int(found.group(2)), 1)


def month_text(month: date) -> str:
    return f"{month.year:04d}-{month.month:02d}"


def month_bounds(month: date) -> tuple[datetime, datetime]:
    """The month's first instant and the next month's first instant (UTC)."""
    start = datetime(month.year, month.month, 1, tzinfo=UTC)
    end = datetime(month.year + (month.month == 12), month.month % 12 + 1, 1, tzinfo=UTC)
    return start, end


def month_of(instant: datetime) -> date:
    instant = to_utc(instant)
    return date(instant.year, instant.month, 1)


@dataclass(frozen=True, slots=True)
class LedgerState:
    """What the store says of one cloud's ledger and reconciliation when a month is to be closed."""

    posted_through: datetime | None  # the earliest clamp of the cloud's posted checkpoints (None: none posted)
    unposted_entities: int  # entities with usage never posted, or checkpoints never advanced
    discrepancies: int  # verify's findings for the cloud (ledger broken, history changed, unbilled)
    deferrals: int  # reconciliation deferrals of the cloud's latest finished run
    reconciled_at: datetime | None  # the poll time of the cloud's latest reconciling run (None: none)
    ever_reconciled: bool  # the cloud has reconciliation runs at all
    month_used: bool = True  # the cloud's lifecycles hold usage dated in the month


def closing_waits(month: date, now: datetime, ingest_lag: timedelta, state: LedgerState) -> list[str]:
    """Why the month cannot be stated yet (empty: it is closed). Each reason is ``code: detail``."""
    _, end = month_bounds(month)
    waits: list[str] = []
    clamp = to_utc(now) - ingest_lag
    if clamp < end:
        waits.append(f"month_open: usage is counted through {format_rfc3339(clamp)} (now − ingest lag), "
                     f"before the month's end {format_rfc3339(end)}")
    if state.posted_through is None:
        if state.month_used:  # a cloud with no usage in the month and none posted has an empty statement
            waits.append("ledger_not_posted: no posting cycle has posted this cloud")
    elif state.posted_through < end:
        waits.append(f"ledger_behind: the ledger is posted through {format_rfc3339(state.posted_through)}, "
                     f"before the month's end {format_rfc3339(end)}")
    if state.unposted_entities:
        waits.append(f"ledger_behind: {state.unposted_entities} entities have usage no cycle has posted")
    if state.discrepancies:
        waits.append(f"ledger_unverified: verification reports {state.discrepancies} discrepancies in this cloud")
    if state.deferrals:
        waits.append(f"deferred: the latest reconciliation run deferred {state.deferrals} corrections")
    if state.ever_reconciled and (state.reconciled_at is None or state.reconciled_at < end):
        waits.append("unreconciled: no reconciliation run has polled the platform since the month's end")
    return waits


@dataclass(frozen=True, slots=True)
class StatementLine:
    """One version of one entity's usage in a month, micro-units of the meter's unit."""

    cloud: str
    project_id: str
    meter: str
    month: date
    version: int  # 1 for the first statement; each re-statement adds one
    micro: int
    unit: str
    previous: int | None  # the amount of the version before (None: the first)

    @property
    def key(self) -> StatementKey:
        return (self.cloud, self.project_id, self.meter)

    @property
    def difference(self) -> int:
        """What this version changes: the amount itself for a first statement."""
        return self.micro - (self.previous or 0)


def restate(
    month: date,
    latest: Mapping[StatementKey, StatementLine],
    current: Mapping[StatementKey, int],
    units: Mapping[str, str],
) -> list[StatementLine]:
    """The versions to add so the statement says ``current``: a first version for each entity with usage
    and no statement, a new version for each stated entity whose amount differs (to zero, when its usage
    of the month vanished), nothing for the rest. Never changes a stated version."""
    lines = []
    for key in sorted(set(latest) | set(current)):
        amount = current.get(key, 0)
        before = latest.get(key)
        if before is None:
            if amount:
                lines.append(StatementLine(*key, month, 1, amount, units[key[2]], None))
        elif before.micro != amount:
            lines.append(StatementLine(*key, month, before.version + 1, amount, before.unit, before.micro))
    return lines


def statable_months(first: date, now: datetime, ingest_lag: timedelta) -> list[date]:
    """The months from ``first`` that have ended by the ingest lag at ``now`` (oldest first)."""
    months, month = [], first
    clamp = to_utc(now) - ingest_lag
    while month_bounds(month)[1] <= clamp:
        months.append(month)
        end = month_bounds(month)[1]
        month = date(end.year, end.month, 1)
    return months


def previous_month(instant: datetime) -> date:
    """The UTC month before the one ``instant`` falls in."""
    start = month_of(instant)
    return month_of(datetime(start.year, start.month, 1, tzinfo=UTC) - timedelta(days=1))
