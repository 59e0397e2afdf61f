"""The posting cycles' own record: what each cycle did, and what it skipped or excluded.

The poster writes ``ledger_cycles`` and ``ledger_skips`` at the end of each cycle; the audit
(``ledger.verify``), the API's ``/metrics`` and the ``TallyLedgerEntitiesSkipped`` alert read them.
They run in other processes than the poster, so the record lives in the store, not in memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from tally_pipeline.store.base import Store, UnitOfWork

#: Every reason a cycle skips an entity or excludes intervals: a fixed set, so /metrics labels
#: stay bounded and every series exists (at 0) before the first skip.
REASONS: tuple[str, ...] = ("bad_size", "unknown_meter", "non_monotonic", "no_checkpoint", "error")


@dataclass(frozen=True, slots=True)
class CycleRow:
    cycle_id: str
    now: datetime
    clamp: datetime
    entities: int
    posted: int
    skipped: int
    excluded: int


@dataclass(frozen=True, slots=True)
class SkipRow:
    cloud: str
    project_id: str
    meter: str
    reason: str  # one of REASONS
    detail: str
    excluded_intervals: int = 0  # > 0: posted without them; 0: not posted


def record_cycle(uow: UnitOfWork, cycle: CycleRow, skips: Sequence[SkipRow]) -> None:
    """Record one cycle and its skips (one row per entity and reason)."""
    uow.execute(
        "INSERT INTO ledger_cycles (cycle_id, now_at, clamp, entities, posted, skipped, excluded, recorded_at)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
        [cycle.cycle_id, cycle.now, cycle.clamp, cycle.entities, cycle.posted, cycle.skipped, cycle.excluded,
         datetime.now(UTC)],
    )
    unique = {(s.cloud, s.project_id, s.meter, s.reason): s for s in skips}
    if unique:
        uow.executemany(
            "INSERT INTO ledger_skips (cycle_id, cloud, project_id, meter, reason, detail, excluded_intervals)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s)",
            [[cycle.cycle_id, s.cloud, s.project_id, s.meter, s.reason, s.detail, s.excluded_intervals]
             for _, s in sorted(unique.items())],
        )


def latest_cycle(uow: UnitOfWork) -> tuple[str, datetime] | None:
    """The id and clamp of the cycle recorded last, or None before the first cycle."""
    rows = uow.fetchall("SELECT cycle_id, clamp FROM ledger_cycles ORDER BY recorded_at DESC, cycle_id LIMIT 1")
    return (rows[0][0], rows[0][1]) if rows else None


def latest_skips(uow: UnitOfWork) -> list[SkipRow]:
    """What the latest cycle skipped or excluded, in key order."""
    rows = uow.fetchall(
        "SELECT s.cloud, s.project_id, s.meter, s.reason, s.detail, s.excluded_intervals FROM ledger_skips s"
        " WHERE s.cycle_id = (SELECT cycle_id FROM ledger_cycles ORDER BY recorded_at DESC, cycle_id LIMIT 1)"
        " ORDER BY 1, 2, 3, 4"
    )
    return [SkipRow(c, p, m, r, d, int(n)) for c, p, m, r, d, n in rows]


def skip_totals(uow: UnitOfWork) -> dict[str, int]:
    """Skips and exclusions by reason over every recorded cycle (each known reason present, maybe 0)."""
    counts = dict.fromkeys(REASONS, 0)
    for reason, n in uow.fetchall("SELECT reason, count(*) FROM ledger_skips GROUP BY reason"):
        counts[reason] = counts.get(reason, 0) + int(n)
    return counts


def latest_skip_counts(uow: UnitOfWork) -> dict[str, int]:
    """Entities the latest cycle skipped or posted with exclusions, by reason (each known reason, maybe 0)."""
    counts = dict.fromkeys(REASONS, 0)
    for s in latest_skips(uow):
        counts[s.reason] = counts.get(s.reason, 0) + 1
    return counts


def skip_metrics(store: Store) -> tuple[dict[str, int], dict[str, int]]:
    """(every cycle's skips by reason, the latest cycle's by reason), read in one unit of work."""
    return store.run(lambda uow: (skip_totals(uow), latest_skip_counts(uow)))


def never_posted(
    uow: UnitOfWork, meters_sql: str, meters_params: Sequence[Any], through: datetime | None
) -> list[tuple[str, str, str]]:
    """Entities with an interval begun before ``through`` (any, when None) that no cycle has posted.

    ``meters_sql`` is the registered meters as relation ``m(resource_type, meter, …)`` with its
    parameters (``usage_sql.UsageSQL.meters``).
    """
    sql = (
        "SELECT DISTINCT i.cloud, i.project_id, m.meter FROM resource_intervals i JOIN " + meters_sql +
        " ON m.resource_type = i.resource_type LEFT JOIN usage_checkpoints c ON c.cloud = i.cloud"
        " AND c.project_id = i.project_id AND c.meter = m.meter WHERE c.clamp IS NULL"
    )
    params = list(meters_params)
    if through is not None:
        sql += " AND i.start_at < %s"
        params.append(through)
    return [(c, p, m) for c, p, m in uow.fetchall(sql + " ORDER BY 1, 2, 3", params)]


def posted_by_entity(uow: UnitOfWork) -> dict[tuple[str, str, str], int]:
    """Everything posted per (cloud, project, meter), both accounts, in micro-units: a tenant's bill."""
    rows = uow.fetchall(
        "SELECT cloud, project_id, meter, sum(amount) * 1000000 FROM ledger_postings GROUP BY cloud, project_id, meter"
    )
    return {(c, p, m): int(micro) for c, p, m, micro in rows}
