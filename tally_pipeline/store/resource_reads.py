"""Reads behind the resource queries (``queries.py``): a resource's events and intervals, its
current state, and the inventory now or as of an instant. Plain SQL meaning the same in both
dialects; JSON columns come back as stored (text on DuckDB, values on Postgres)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from tally_pipeline.core.platform import UNKNOWN_STATUS
from tally_pipeline.store.base import Store

ResourceKey = tuple[str, str, str]

_FOLD_ORDER = "occurred_at, CASE verb WHEN 'create' THEN 0 WHEN 'update' THEN 1 WHEN 'note' THEN 2 ELSE 3 END, event_id"
HISTORY_COLUMNS = ("event_id", "event_type", "cloud", "resource_type", "resource_id", "project_id", "occurred_at",
                   "source", "payload", "verb", "received_at", "seq")
INVENTORY_COLUMNS = ("cloud", "resource_type", "resource_id", "project_id", "size", "status", "created_at")


def resource_history(store: Store, key: ResourceKey) -> list[tuple[Any, ...]]:
    """The resource's events in fold order, in ``HISTORY_COLUMNS``."""
    where, params = store.resource_events_filter(key)
    return store.query(f"SELECT {', '.join(HISTORY_COLUMNS)} FROM events WHERE {where} ORDER BY {_FOLD_ORDER}", params)


def resource_intervals(store: Store, key: ResourceKey) -> list[tuple[Any, ...]]:
    """``(start_at, end_at, project_id, size, lifecycle_no, platform_status)`` per interval, in order."""
    return store.query(
        "SELECT start_at, end_at, project_id, size, lifecycle_no, platform_status FROM resource_intervals "
        "WHERE cloud = %s AND resource_type = %s AND resource_id = %s ORDER BY interval_no",
        list(key),
    )


def unknown_status_intervals(store: Store) -> list[tuple[str, str, int]]:
    """``(cloud, resource_type, intervals)`` for the intervals whose platform status is unknowable."""
    rows = store.query(
        "SELECT cloud, resource_type, COUNT(*) FROM resource_intervals WHERE platform_status = %s "
        "GROUP BY cloud, resource_type ORDER BY cloud, resource_type",
        [UNKNOWN_STATUS],
    )
    return [(str(cloud), str(rtype), int(n)) for cloud, rtype, n in rows]


def current_resource(store: Store, key: ResourceKey) -> tuple[Any, ...] | None:
    """``(status, project_id, size, created_at, deleted_at, last_event_at, event_count, platform_status)``;
    None if unknown."""
    rows = store.query(
        "SELECT status, project_id, size, created_at, deleted_at, last_event_at, event_count, platform_status "
        "FROM current_resources WHERE cloud = %s AND resource_type = %s AND resource_id = %s",
        list(key),
    )
    return rows[0] if rows else None


def inventory(
    store: Store,
    *,
    cloud: str | None,
    resource_type: str | None,
    project_id: str | None,
    as_of: datetime | None,
    after: ResourceKey | None,
    limit: int,
) -> list[tuple[Any, ...]]:
    """Live resources (at ``as_of`` if given) in key order after ``after``, at most ``limit``, in ``INVENTORY_COLUMNS``."""
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
    return store.query(sql, [*params, limit])
