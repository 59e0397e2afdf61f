"""What people ask about: a resource's history and lifecycle, and the inventory (now or as of an instant).

Every query first folds whatever was stored before it began (read-your-writes), so an answer never
lags an event the caller already saw acknowledged.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson

from tally_pipeline import projection
from tally_pipeline.store.base import Store

ResourceKey = tuple[str, str, str]

_FOLD_ORDER = "occurred_at, CASE verb WHEN 'create' THEN 0 WHEN 'update' THEN 1 WHEN 'note' THEN 2 ELSE 3 END, event_id"


def _json(value: Any) -> Any:
    """JSON columns come back as text from DuckDB and as Python values from Postgres."""
    if isinstance(value, str):
        return orjson.loads(value)
    return value


def history(store: Store, cloud: str, resource_type: str, resource_id: str) -> list[dict[str, Any]] | None:
    """The resource's events in fold order, each as stored plus its verb; None for an unknown resource."""
    rows = store.query(
        "SELECT event_id, event_type, cloud, resource_type, resource_id, project_id, occurred_at, source, "
        "payload, verb, received_at, seq FROM events "
        "WHERE cloud = %s AND resource_type = %s AND resource_id = %s "
        f"ORDER BY {_FOLD_ORDER}",
        [cloud, resource_type, resource_id],
    )
    if not rows:
        return None
    names = ("event_id", "event_type", "cloud", "resource_type", "resource_id", "project_id", "occurred_at",
             "source", "payload", "verb", "received_at", "seq")
    out = []
    for row in rows:
        item = dict(zip(names, row))
        item["payload"] = _json(item["payload"])
        out.append(item)
    return out


def lifecycle(store: Store, cloud: str, resource_type: str, resource_id: str) -> list[dict[str, Any]] | None:
    """The resource's intervals ``[start, end)``; None for an unknown resource (no events at all)."""
    projection.refresh(store)
    rows = store.query(
        "SELECT start_at, end_at, project_id, size, lifecycle_no FROM resource_intervals "
        "WHERE cloud = %s AND resource_type = %s AND resource_id = %s ORDER BY interval_no",
        [cloud, resource_type, resource_id],
    )
    if not rows and not store.query(
        "SELECT 1 FROM current_resources WHERE cloud = %s AND resource_type = %s AND resource_id = %s",
        [cloud, resource_type, resource_id],
    ):
        return None
    return [
        {"start": start, "end": end, "project_id": project, "size": _json(size), "lifecycle": number}
        for start, end, project, size, number in rows
    ]


def resource_state(store: Store, cloud: str, resource_type: str, resource_id: str) -> dict[str, Any] | None:
    projection.refresh(store)
    rows = store.query(
        "SELECT status, project_id, size, created_at, deleted_at, last_event_at, event_count "
        "FROM current_resources WHERE cloud = %s AND resource_type = %s AND resource_id = %s",
        [cloud, resource_type, resource_id],
    )
    if not rows:
        return None
    status, project, size, created, deleted, last, count = rows[0]
    return {"status": status, "project_id": project, "size": _json(size), "created_at": created,
            "deleted_at": deleted, "last_event_at": last, "event_count": count}


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
    clauses: list[str] = []
    params: list[Any] = []
    prefix = "i." if as_of is not None else ""
    for column, value in (("cloud", cloud), ("resource_type", resource_type), ("project_id", project_id)):
        if value is not None:
            clauses.append(f"{prefix}{column} = %s")
            params.append(value)
    if after is not None:
        clauses.append(f"({prefix}cloud, {prefix}resource_type, {prefix}resource_id) > (%s, %s, %s)")
        params.extend(after)
    if as_of is None:
        where = " AND ".join(["status = 'live'", *clauses])
        sql = (
            "SELECT cloud, resource_type, resource_id, project_id, size, status, created_at "
            f"FROM current_resources WHERE {where} "
            "ORDER BY cloud, resource_type, resource_id LIMIT %s"
        )
    else:
        where = " AND ".join(["i.start_at <= %s", "(i.end_at IS NULL OR i.end_at > %s)", *clauses])
        params = [as_of, as_of, *params]
        sql = (
            "SELECT i.cloud, i.resource_type, i.resource_id, i.project_id, i.size, 'live' AS status, "
            "(SELECT min(j.start_at) FROM resource_intervals j WHERE j.cloud = i.cloud "
            " AND j.resource_type = i.resource_type AND j.resource_id = i.resource_id "
            " AND j.lifecycle_no = i.lifecycle_no) AS created_at "
            f"FROM resource_intervals i WHERE {where} "
            "ORDER BY i.cloud, i.resource_type, i.resource_id LIMIT %s"
        )
    rows = store.query(sql, [*params, limit + 1])
    names = ("cloud", "resource_type", "resource_id", "project_id", "size", "status", "created_at")
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
