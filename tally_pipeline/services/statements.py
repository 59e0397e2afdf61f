"""Monthly statements: close a month of a cloud (state it, or re-state what changed), and read one back.

The rules (when a month is closed, what a re-statement holds) are ``core.statements``; the tables and
the month's usage in SQL are ``store.statements``. Closing folds the stored events first and verifies
the ledger with the verification service (``services.ledger.verify``), like every reader of the ledger.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any, Literal

from tally_pipeline.core.registry import SizeSchemaRegistry
from tally_pipeline.core.statements import LedgerState, StatementLine, closing_waits, month_bounds, month_text, restate
from tally_pipeline.core.timeutil import format_rfc3339, to_utc
from tally_pipeline.core.usage import to_units
from tally_pipeline.services import projection
from tally_pipeline.services.ledger.verify import verify_in
from tally_pipeline.store import ledger_reads, statements, sync_runs
from tally_pipeline.store.base import Store, UnitOfWork
from tally_pipeline.store.statements import StatedLine, StatedMonth

Status = Literal["stated", "restated", "unchanged", "waiting"]


@dataclass
class MonthOutcome:
    """What closing one month of one cloud did."""

    cloud: str
    month: date
    status: Status
    waits: list[str] = field(default_factory=list)  # why it waits (status "waiting"), each "code: detail"
    new: list[StatementLine] = field(default_factory=list)  # the versions written
    lines: int = 0  # entities with a statement line after the run
    posted_through: datetime | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "cloud": self.cloud,
            "month": month_text(self.month),
            "status": self.status,
            "waits": self.waits,
            "new_versions": len(self.new),
            "restated": sum(1 for n in self.new if n.version > 1),
            "lines": self.lines,
            "posted_through": None if self.posted_through is None else format_rfc3339(self.posted_through),
        }


def close_month(
    store: Store,
    registry: SizeSchemaRegistry,
    *,
    cloud: str,
    month: date,
    now: datetime,
    ingest_lag: timedelta | float,
) -> MonthOutcome:
    """State ``month`` of ``cloud`` if it is closed (``core.statements.closing_waits``): a first version
    for each entity with usage in it, and, when it was stated before, a new version for each entity whose
    usage of the month changed since (late usage). Waits, writing nothing, while anything is open."""
    lag = ingest_lag if isinstance(ingest_lag, timedelta) else timedelta(seconds=ingest_lag)
    now = to_utc(now)
    projection.refresh(store)  # like every reader: the events stored so far, folded
    meters = registry.meters()
    units = {m.name: m.unit for m in meters}

    def work(uow: UnitOfWork) -> MonthOutcome:
        sql = store.usage_sql()
        sql.read_snapshot(uow)  # one snapshot: the verification, the ledger and the month's usage agree
        findings = [d for d in verify_in(uow, store, registry).discrepancies if d.cloud == cloud]
        posted_through, never_posted = ledger_reads.cloud_posted_through(uow, cloud)
        ever, reconciled_at, deferrals = sync_runs.latest_reconciliation(uow, cloud)
        usage = statements.usage_in_month(uow, sql, meters, cloud, month)
        state = LedgerState(posted_through, never_posted, len(findings), deferrals, reconciled_at, ever,
                            bool(usage.micro or usage.unusable))
        waits = closing_waits(month, now, lag, state)
        if usage.unusable:
            n, example = next(iter(usage.unusable.values()))
            waits.append(f"unbilled: {len(usage.unusable)} entities hold intervals the meters cannot read "
                         f"({n} in the first, e.g. {example})")
        if waits:
            return MonthOutcome(cloud, month, "waiting", waits, posted_through=posted_through)
        if posted_through is None:  # nothing posted and nothing used: the month's end is as far as it is known
            posted_through = month_bounds(month)[1]
        latest = {s.line.key: s.line for s in statements.lines(uow, cloud, month)}
        known = statements.month_record(uow, cloud, month)
        new = restate(month, latest, usage.micro, units)
        statements.write(uow, sql, cloud, month, new, at=now, posted_through=posted_through,
                         watermark=statements.projection_watermark(uow))
        status: Status = "stated" if known is None else "restated" if new else "unchanged"
        entities = len(set(latest) | {n.key for n in new})
        return MonthOutcome(cloud, month, status, [], new, entities, posted_through)

    return store.run(work)


@dataclass(frozen=True, slots=True)
class Statement:
    """A month of a cloud as stated: its record (None: not stated yet) and its lines."""

    cloud: str
    month: date
    record: StatedMonth | None
    lines: list[StatedLine]

    def to_dict(self) -> dict[str, Any]:
        """The answer of ``GET /v1/statements/{cloud}/{month}`` and ``tally usage show`` (amounts as exact text)."""
        start, end = month_bounds(self.month)
        record = self.record
        return {
            "cloud": self.cloud,
            "month": month_text(self.month),
            "from": format_rfc3339(start),
            "to": format_rfc3339(end),
            "stated": record is not None,
            "stated_at": None if record is None else format_rfc3339(record.stated_at),
            "restated_at": None if record is None or record.restated_at is None else format_rfc3339(record.restated_at),
            "checked_at": None if record is None else format_rfc3339(record.checked_at),
            "statements": [line_dict(s) for s in self.lines],
        }


def line_dict(stated: StatedLine) -> dict[str, Any]:
    line = stated.line
    return {
        "project_id": line.project_id,
        "meter": line.meter,
        "version": line.version,
        "quantity": str(to_units(line.micro)),
        "unit": line.unit,
        "previous_quantity": None if line.previous is None else str(to_units(line.previous)),
        "difference": str(to_units(line.difference)),
        "stated_at": format_rfc3339(stated.stated_at),
    }


def read_statement(store: Store, cloud: str, month: date, *, project_id: str | None = None,
                   versions: bool = False) -> Statement:
    """A month's statement of a cloud (one project's lines when given): each entity's latest version,
    or every version (``versions``), in one snapshot."""
    def read(uow: UnitOfWork) -> Statement:
        store.usage_sql().read_snapshot(uow)
        record = statements.month_record(uow, cloud, month)
        return Statement(cloud, month, record,
                         statements.lines(uow, cloud, month, project_id=project_id, latest_only=not versions))

    return store.run(read)


def clouds_to_state(store: Store) -> list[str]:
    """The clouds with usage or a ledger: each has its statement of a month (configured or not any more)."""
    return store.run(statements.clouds_with_usage)
