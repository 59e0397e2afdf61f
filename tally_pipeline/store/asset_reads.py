"""Reads behind what Dagster and the demo show: materialization metadata, sensors' cursors and
follow-up decisions, the demo's report.

Plain SQL that means the same in both dialects; the Dagster wiring (``defs/``) and the demo call these
instead of holding SQL themselves.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from tally_pipeline.store.base import Store
from tally_pipeline.store.sync_runs import LATEST_FINISHED


def cloud_activity(store: Store) -> list[tuple[str, int, int, datetime | None]]:
    """Per cloud: collector events, reconciliation events, last collector event."""
    return [tuple(r) for r in store.query(
        "SELECT cloud, collector_events, reconciliation_events, last_collector_event FROM cloud_activity ORDER BY cloud"
    )]


def last_collector_events(store: Store) -> list[tuple[str, datetime | None]]:
    """Per cloud: its last collector event (None before the first)."""
    return [(c, t) for c, t in store.query("SELECT cloud, last_collector_event FROM cloud_activity ORDER BY cloud")]


def rejected_count(store: Store) -> int:
    return int(store.query("SELECT count(*) FROM rejected_events")[0][0])


def rejected_by_reason(store: Store) -> list[tuple[str, int]]:
    return [(r, int(n)) for r, n in store.query(
        "SELECT reason, count(*) FROM rejected_events GROUP BY reason ORDER BY 2 DESC, 1")]


def live_by_cloud_and_type(store: Store) -> list[tuple[str, str, int]]:
    return [(c, t, int(n)) for c, t, n in store.query(
        "SELECT cloud, resource_type, count(*) FROM current_resources WHERE status = 'live' "
        "GROUP BY cloud, resource_type ORDER BY cloud, resource_type")]


def resource_statuses(store: Store) -> dict[str, int]:
    return {s: int(n) for s, n in store.query("SELECT status, count(*) FROM current_resources GROUP BY status")}


def interval_counts(store: Store) -> tuple[int, int]:
    """All rows of resource_intervals, and the open ones."""
    total, open_ = store.query("SELECT count(*), count(*) - count(end_at) FROM resource_intervals")[0]
    return int(total), int(open_ or 0)


def projection_watermark(store: Store) -> int:
    return int(store.query("SELECT watermark FROM projection_state WHERE name = 'resources'")[0][0])


def usage_totals_by_day(store: Store, first: date, last: date) -> dict[date, dict[str, Any]]:
    """Per UTC day of [first, last]: rows, and quantity per meter."""
    out: dict[date, dict[str, Any]] = defaultdict(lambda: {"rows": 0, "meters": {}})
    for day, meter, rows, quantity in store.query(
        "SELECT day, meter, count(*), sum(quantity) FROM usage_daily WHERE day >= %s AND day <= %s "
        "GROUP BY day, meter ORDER BY day, meter",
        [first, last],
    ):
        day = day if isinstance(day, date) and not isinstance(day, datetime) else date.fromisoformat(str(day)[:10])
        out[day]["rows"] += int(rows)
        out[day]["meters"][meter] = Decimal(quantity)
    return dict(out)


def clouds_ever_synced(store: Store) -> set[str]:
    """Clouds with at least one finished sync run."""
    return {c for (c,) in store.query("SELECT DISTINCT cloud FROM sync_runs WHERE status <> 'running'")}


def due_follow_ups(store: Store, now: datetime) -> list[tuple[str, datetime]]:
    """Clouds whose latest finished run deferred something now due: (cloud, latest due time)."""
    return [(c, d) for c, d in store.query(
        "SELECT d.cloud, max(d.retry_after) FROM sync_deferrals d "
        f"JOIN {LATEST_FINISHED} "
        "ON d.cloud = l.cloud JOIN sync_runs r ON r.cloud = l.cloud AND r.started_at = l.started_at "
        "AND r.run_id = d.run_id "
        "WHERE d.retry_after IS NOT NULL AND d.retry_after <= %s GROUP BY d.cloud",
        [now],
    )]


def ledger_totals_by_meter(store: Store) -> dict[str, Decimal]:
    return {m: Decimal(a) for m, a in store.query("SELECT meter, sum(amount) FROM ledger_postings GROUP BY meter")}


def sync_run_totals(store: Store) -> dict[str, int]:
    """Every sync run so far: how many, and their corrections."""
    runs, created, updated, deleted, recovered = store.query(
        "SELECT count(*), sum(created), sum(updated), sum(deleted), sum(recovered) FROM sync_runs")[0]
    return {"runs": int(runs), "created": int(created or 0), "updated": int(updated or 0),
            "deleted": int(deleted or 0), "recovered": int(recovered or 0)}


def deferrals_by_reason(store: Store) -> dict[str, int]:
    return {r: int(n) for r, n in store.query(
        "SELECT reason, count(*) FROM sync_deferrals GROUP BY reason ORDER BY reason")}


def postings_by_account(store: Store) -> dict[str, int]:
    return {a: int(n) for a, n in store.query("SELECT account, count(*) FROM ledger_postings GROUP BY account")}
