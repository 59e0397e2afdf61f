"""Helpers for the usage and ledger tests: interval rows written straight into the projection table,
and the Python model of what the ledger must hold (from ``core``, never from the SQL under test)."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from tally_pipeline.core.ledger import EntityKey
from tally_pipeline.core.registry import SizeSchemaRegistry
from tally_pipeline.core.usage import Interval, MeterValueError, cumulative_usage_micro, to_micro
from tally_pipeline.store import Store

T0 = datetime(2026, 3, 1, tzinfo=UTC)
HOUR = timedelta(hours=1)
DAY = timedelta(days=1)


def vm(vcpus: Any = 2, ram_mb: Any = 4096) -> dict[str, Any]:
    return {"flavor_name": "m1", "vcpus": vcpus, "ram_mb": ram_mb, "disk_gb": 10}


@dataclass(frozen=True)
class Row:
    """One row of resource_intervals."""

    project_id: str
    resource_id: str
    start: datetime
    end: datetime | None
    size: Any
    resource_type: str = "instance"
    interval_no: int = 1
    cloud: str = "c1"
    platform_status: str | None = None

    def interval(self) -> Interval:
        return Interval(self.start, self.end, self.size, self.resource_id, self.platform_status)


def insert(store: Store, *rows: Row) -> None:
    def work(uow):
        for r in rows:
            uow.execute(
                "INSERT INTO resource_intervals (cloud, resource_type, resource_id, interval_no, lifecycle_no,"
                " project_id, size, start_at, end_at, platform_status)"
                " VALUES (%s, %s, %s, %s, 1, %s, CAST(%s AS JSON), %s, %s, %s)",
                [r.cloud, r.resource_type, r.resource_id, r.interval_no, r.project_id, json.dumps(r.size), r.start, r.end,
                 r.platform_status],
            )

    store.run(work)


def replace_row(store: Store, old: Row, **changes: Any) -> Row:
    """Change one stored interval (a late update, or a synthetic delete closing it earlier)."""
    new = replace(old, **changes)
    store.run(
        lambda uow: uow.execute(
            "UPDATE resource_intervals SET size = CAST(%s AS JSON), start_at = %s, end_at = %s"
            " WHERE cloud = %s AND resource_type = %s AND resource_id = %s AND interval_no = %s",
            [json.dumps(new.size), new.start, new.end, old.cloud, old.resource_type, old.resource_id, old.interval_no],
        )
    )
    return new


def delete_row(store: Store, old: Row) -> None:
    store.run(
        lambda uow: uow.execute(
            "DELETE FROM resource_intervals WHERE cloud = %s AND resource_type = %s AND resource_id = %s"
            " AND interval_no = %s",
            [old.cloud, old.resource_type, old.resource_id, old.interval_no],
        )
    )


def model_usage(registry: SizeSchemaRegistry, rows: list[Row], through: datetime) -> dict[EntityKey, int | None]:
    """Usage per entity through ``through`` by ``core.usage``; None for an entity with an unusable size."""
    grouped: dict[tuple[str, str, str], list[Row]] = defaultdict(list)
    for r in rows:
        grouped[(r.cloud, r.project_id, r.resource_type)].append(r)
    out: dict[EntityKey, int | None] = {}
    for (cloud, project_id, rtype), group in grouped.items():
        if not any(r.start < through for r in group):
            continue
        for meter in registry[rtype].meters:
            try:
                out[EntityKey(cloud, project_id, meter.name)] = cumulative_usage_micro(
                    meter, [r.interval() for r in group], through
                )
            except MeterValueError:
                out[EntityKey(cloud, project_id, meter.name)] = None
    return out


def postings(store: Store) -> dict[tuple[EntityKey, str], int]:
    """Sum of postings per (entity, account), in micro-units."""
    rows = store.query("SELECT cloud, project_id, meter, account, sum(amount) FROM ledger_postings GROUP BY 1, 2, 3, 4")
    return {(EntityKey(c, p, m), a): to_micro(amount) for c, p, m, a, amount in rows}


def posted_total(store: Store) -> dict[EntityKey, int]:
    out: dict[EntityKey, int] = defaultdict(int)
    for (key, _), micro in postings(store).items():
        out[key] += micro
    return dict(out)


def checkpoints(store: Store) -> dict[EntityKey, tuple[int, datetime | None]]:
    rows = store.query("SELECT cloud, project_id, meter, total, clamp FROM usage_checkpoints")
    return {EntityKey(c, p, m): (to_micro(total), clamp) for c, p, m, total, clamp in rows}


def posting_count(store: Store) -> int:
    return int(store.query("SELECT count(*) FROM ledger_postings")[0][0])
