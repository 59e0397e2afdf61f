"""What the UI shows about the ingest tables, recorded with each materialization of them (by the
ingest assets, the api_writes_sensor and every sync run)."""

from typing import Any

from tally_pipeline.orchestration.metadata import md_table
from tally_pipeline.orchestration.resources import StoreReads

ACTIVITY_HEADER = ["cloud", "collector events", "reconciliation events", "last collector event"]


def _activity_rows(rows: list[tuple[str, int, int, Any]]) -> list[list[Any]]:
    return [[c, n, m, t.isoformat() if t else "never"] for c, n, m, t in rows]


def event_log_metadata(db: StoreReads) -> dict[str, Any]:
    rows = db.cloud_activity()
    return {
        "dagster/row_count": db.event_count(),
        "by_cloud": md_table(ACTIVITY_HEADER, _activity_rows(rows)),
        "reconciliation_events": sum(r[2] for r in rows),
    }


def dead_letter_metadata(db: StoreReads) -> dict[str, Any]:
    by_reason = db.rejected_by_reason()
    newest = db.newest_rejected(limit=10)
    return {
        "dagster/row_count": sum(n for _, n in by_reason),
        "by_reason": md_table(["reason", "rows"], [[r, n] for r, n in by_reason]),
        "newest": md_table(["received_at", "reason", "cloud", "message"],
                            [[e.received_at.isoformat(), e.reason, e.cloud or "", e.message[:120]] for e in newest]),
    }


def cloud_activity_metadata(db: StoreReads) -> dict[str, Any]:
    rows = db.cloud_activity()
    # A configured cloud with no event at all has no row; events_silent never fires for it, so say so here.
    quiet = sorted({c for c, n, _, _ in rows if not n} | (set(db.config.clouds) - {r[0] for r in rows}))
    return {
        "dagster/row_count": len(rows),
        "clouds": md_table(ACTIVITY_HEADER, _activity_rows(rows)),
        "never_sent_a_collector_event": ", ".join(quiet) or "none",
    }
