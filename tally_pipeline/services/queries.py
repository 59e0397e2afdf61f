"""What people ask about: a resource's history and lifecycle, and the inventory (now or as of an instant).

Every query first folds whatever was stored before it began (read-your-writes), so an answer never
lags an event the caller already saw acknowledged.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson

from tally_pipeline.services import projection
from tally_pipeline.store import resource_reads
from tally_pipeline.store.base import Store
from tally_pipeline.store.resource_reads import ResourceKey


def _json(value: Any) -> Any:
    """JSON columns come back as text from DuckDB and as Python values from Postgres."""
    if isinstance(value, str):
        return orjson.loads(value)
    return value


def history(store: Store, cloud: str, resource_type: str, resource_id: str) -> list[dict[str, Any]] | None:
    """The resource's events in fold order, each as stored plus its verb; None for an unknown resource."""
    rows = resource_reads.resource_history(store, (cloud, resource_type, resource_id))
    if not rows:
        return None
    names = resource_reads.HISTORY_COLUMNS
    out = []
    for row in rows:
        item = dict(zip(names, row))
        item["payload"] = _json(item["payload"])
        out.append(item)
    return out


def lifecycle(store: Store, cloud: str, resource_type: str, resource_id: str) -> list[dict[str, Any]] | None:
    """The resource's intervals ``[start, end)``; None for an unknown resource (no events at all)."""
    projection.refresh(store)
    key = (cloud, resource_type, resource_id)
    rows = resource_reads.resource_intervals(store, key)
    if not rows and resource_reads.current_resource(store, key) is None:
        return None
    return [
        {"start": start, "end": end, "project_id": project, "size": _json(size), "lifecycle": number,
         "platform_status": platform}
        for start, end, project, size, number, platform in rows
    ]


def resource_state(store: Store, cloud: str, resource_type: str, resource_id: str) -> dict[str, Any] | None:
    projection.refresh(store)
    row = resource_reads.current_resource(store, (cloud, resource_type, resource_id))
    if row is None:
        return None
    status, project, size, created, deleted, last, count, platform = row
    return {"status": status, "project_id": project, "size": _json(size), "created_at": created,
            "deleted_at": deleted, "last_event_at": last, "event_count": count, "platform_status": platform}


@dataclass(frozen=True)
class InventoryPage:
    resources: list[dict[str, Any]]
    next_key: ResourceKey | None


def inventory(
    store: Store,
    *,
    cloud: str | None = None,
    resource_type: str | None = None,
    project_id: str | None = None,
    as_of: datetime | None = None,
    after: ResourceKey | None = None,
    limit: int = 100,
) -> InventoryPage:
    """Live resources (at ``as_of`` if given), in key order, ``limit`` at a time after ``after``.

    Keyset pagination: while events arrive, a page never repeats a resource and never skips one
    that was live throughout.
    """
    projection.refresh(store)
    rows = resource_reads.inventory(
        store, cloud=cloud, resource_type=resource_type, project_id=project_id, as_of=as_of, after=after,
        limit=limit + 1,
    )
    names = resource_reads.INVENTORY_COLUMNS
    resources = []
    for row in rows[:limit]:
        item = dict(zip(names, row))
        item["size"] = _json(item["size"])
        resources.append(item)
    next_key = None
    if len(rows) > limit:
        last = resources[-1]
        next_key = (last["cloud"], last["resource_type"], last["resource_id"])
    return InventoryPage(resources, next_key)
