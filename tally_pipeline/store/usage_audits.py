"""``usage_audits`` (its one writer) and the reads the usage audit makes: a cloud's server intervals in a
window, its checkpoints' clamps, its deferred servers. Plain SQL meaning the same in both dialects."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from tally_pipeline.store.base import Store

AUDIT_COLUMNS = ("audit_id", "cloud", "audited_at", "recorded_at", "window_start", "window_end", "status", "projects",
                 "projects_failing", "servers_nova", "servers_tally", "unexplained_instance_hours",
                 "unexplained_vcpu_hours", "differences", "api_calls", "seconds", "error")


def server_intervals(store: Store, cloud: str, start: datetime, end: datetime) -> list[tuple[Any, ...]]:
    """``(resource_id, project_id, start_at, end_at, size, platform_status, lifecycle_no)`` of the cloud's
    instance intervals that overlap ``[start, end)``, in resource and interval order."""
    return store.query(
        "SELECT resource_id, project_id, start_at, end_at, size, platform_status, lifecycle_no "
        "FROM resource_intervals WHERE cloud = %s AND resource_type = 'instance' AND start_at < %s "
        "AND (end_at IS NULL OR end_at > %s) ORDER BY resource_id, interval_no",
        [cloud, end, start],
    )


def checkpoint_clamps(store: Store, cloud: str) -> dict[tuple[str, str], datetime | None]:
    """(project_id, meter) → the checkpoint's clamp (None: opened, never posted) for the cloud."""
    rows = store.query("SELECT project_id, meter, clamp FROM usage_checkpoints WHERE cloud = %s", [cloud])
    return {(str(p), str(m)): c for p, m, c in rows}


def deferred_servers(store: Store, cloud: str, since: datetime) -> dict[str, str]:
    """Server id → the latest deferral's reason and detail, for the cloud's instances deferred since ``since``."""
    rows = store.query(
        "SELECT resource_id, reason, action, detail, deferred_at FROM sync_deferrals WHERE cloud = %s "
        "AND resource_type = 'instance' AND deferred_at >= %s ORDER BY deferred_at",
        [cloud, since],
    )
    return {str(rid): f"{reason} ({action}) at {at.isoformat()}: {detail or ''}".rstrip(": ")
            for rid, reason, action, detail, at in rows}


def record(store: Store, row: Mapping[str, Any]) -> None:
    """Keep one audit's verdict and figures."""
    values = [json.dumps(row[c], sort_keys=True) if c == "differences" else row[c] for c in AUDIT_COLUMNS]
    store.run(lambda uow: uow.execute(
        f"INSERT INTO usage_audits ({', '.join(AUDIT_COLUMNS)}) VALUES ({', '.join(['%s'] * len(AUDIT_COLUMNS))})",
        values))


def latest(store: Store) -> list[dict[str, Any]]:
    """Each cloud's latest audit (the last kept), by cloud."""
    rows = store.query(
        f"SELECT {', '.join('a.' + c for c in AUDIT_COLUMNS)} FROM usage_audits a JOIN "
        "(SELECT cloud, max(recorded_at) AS recorded_at FROM usage_audits GROUP BY cloud) l "
        "ON a.cloud = l.cloud AND a.recorded_at = l.recorded_at ORDER BY a.cloud, a.audit_id")
    out: dict[str, dict[str, Any]] = {}
    for values in rows:
        row = dict(zip(AUDIT_COLUMNS, values, strict=True))
        row["differences"] = json.loads(row["differences"]) if isinstance(row["differences"], str) else row["differences"]
        out[row["cloud"]] = row
    return list(out.values())
