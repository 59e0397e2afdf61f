"""The fold as the UI sees it. The fold also runs inside other jobs' bodies (a sync folds its own
corrections, the posting cycle and usage_daily fold what is pending so they count every stored event).
Those refreshes are reported as materializations of the projection assets, so "materialized at" is
always the last real write.
"""

from collections.abc import Mapping
from typing import Any

import dagster as dg

from tally_pipeline.orchestration.metadata import md_table
from tally_pipeline.orchestration.resources import StoreReads, TallyStore
from tally_pipeline.services.projection import RefreshResult

#: The projection's assets: one multi-asset, so a refresh materializes all three (and a run selects all three).
PROJECTION_ASSETS = ("current_resources", "resource_intervals", "projection_state")
#: The job of those three (defs/projection/jobs.py), by name: another domain's sensor starts it without importing it.
PROJECTION_REFRESH_JOB = "projection_refresh"


def projection_metadata(db: StoreReads, result: RefreshResult | None, by: str) -> dict[str, dict[str, Any]]:
    """Each projection table's metadata after a refresh (``result`` None when the refresh was a sync's own)."""
    statuses = db.resource_statuses()
    intervals, open_intervals = db.interval_counts()
    watermark = db.projection_watermark()
    done: dict[str, Any] = {"refreshed_by": by}
    if result is not None:
        done |= {"refolded_resources": result.resources, "refresh_seconds": round(result.seconds, 4)}
    return {
        "current_resources": {
            "dagster/row_count": sum(statuses.values()), **done, "watermark_seq": watermark,
            "live": statuses.get("live", 0), "deleted": statuses.get("deleted", 0), "unborn": statuses.get("unborn", 0),
            "live_by_cloud_and_type": md_table(["cloud", "type", "live"], [list(r) for r in db.live_by_cloud_and_type()]),
        },
        "resource_intervals": {"dagster/row_count": intervals, "open_intervals": open_intervals, **done},
        "projection_state": {"watermark_seq": watermark, "event_log_rows": db.event_count(), **done},
    }


def report_refresh(context: dg.AssetExecutionContext, db: StoreReads, result: RefreshResult | None,
                   by: str, extra: Mapping[str, Any] | None = None) -> None:
    """Record a refresh made inside another asset's body as materializations of the projection assets
    (``extra``: more metadata for each, e.g. the analyst snapshot the run wrote after the refresh)."""
    for key, metadata in projection_metadata(db, result, by).items():
        context.log_event(dg.AssetMaterialization(asset_key=key, metadata={**metadata, **(extra or {})}))


def refresh_and_report(context: dg.AssetExecutionContext, db: TallyStore, by: str) -> RefreshResult:
    """Fold what is pending; when that wrote anything, record it as a materialization of the projections."""
    result = db.refresh_projection()
    if result.resources:
        report_refresh(context, db, result, by)
    return result
