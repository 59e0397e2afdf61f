"""The projections as assets: folded from the event log, kept fresh by declarative automation.

The fold also runs inside other jobs' bodies (a sync folds its own corrections, the posting cycle
and usage_daily fold what is pending so they count every stored event). Those refreshes are
reported as materializations of the same assets, so "materialized at" is always the last real write.
"""


from typing import Any

import dagster as dg

from tally_pipeline import projection
from tally_pipeline.defs.automation import FOLLOWS_EVENTS
from tally_pipeline.defs.metadata import md_table
from tally_pipeline.defs.resources import TallyStore
from tally_pipeline.defs.snapshot import write_analyst_snapshot
from tally_pipeline.defs.tags import POOL
from tally_pipeline.store import asset_reads

PROJECTION_ASSETS = ("current_resources", "resource_intervals", "projection_state")


def projection_metadata(rt: Any, result: projection.RefreshResult | None, by: str) -> dict[str, dict[str, Any]]:
    """Each projection table's metadata after a refresh (``result`` None when the refresh was a sync's own)."""
    statuses = asset_reads.resource_statuses(rt.store)
    intervals, open_intervals = asset_reads.interval_counts(rt.store)
    watermark = asset_reads.projection_watermark(rt.store)
    done = {"refreshed_by": by}
    if result is not None:
        done |= {"refolded_resources": result.resources, "refresh_seconds": round(result.seconds, 4)}
    return {
        "current_resources": {
            "dagster/row_count": sum(statuses.values()), **done, "watermark_seq": watermark,
            "live": statuses.get("live", 0), "deleted": statuses.get("deleted", 0), "unborn": statuses.get("unborn", 0),
            "live_by_cloud_and_type": md_table(["cloud", "type", "live"],
                                               [list(r) for r in asset_reads.live_by_cloud_and_type(rt.store)]),
        },
        "resource_intervals": {"dagster/row_count": intervals, "open_intervals": open_intervals, **done},
        "projection_state": {"watermark_seq": watermark, "event_log_rows": rt.store.event_count(), **done},
    }


def report_refresh(context: dg.AssetExecutionContext, rt: Any, result: projection.RefreshResult | None,
                   by: str) -> None:
    """Record a refresh made inside another asset's body as materializations of the projection assets."""
    for key, metadata in projection_metadata(rt, result, by).items():
        context.log_event(dg.AssetMaterialization(asset_key=key, metadata=metadata))


def refresh_and_report(context: dg.AssetExecutionContext, rt: Any, by: str) -> projection.RefreshResult:
    """Fold what is pending; when that wrote anything, record it as a materialization of the projections."""
    result = projection.refresh(rt.store)
    if result.resources:
        report_refresh(context, rt, result, by)
    return result


@dg.multi_asset(
    specs=[
        dg.AssetSpec(
            "current_resources", group_name="projection", kinds={"duckdb", "postgres"}, deps=["event_log"],
            automation_condition=FOLLOWS_EVENTS,
            description="One row per resource: live, deleted or unborn, with project, size, lifecycle times.",
        ),
        dg.AssetSpec(
            "resource_intervals", group_name="projection", kinds={"duckdb", "postgres"}, deps=["event_log"],
            automation_condition=FOLLOWS_EVENTS,
            description="Each resource's lifecycle: [start, end) intervals with project and size (docs/projection.md).",
        ),
        dg.AssetSpec(
            "projection_state", group_name="projection", kinds={"duckdb", "postgres"}, deps=["event_log"],
            automation_condition=FOLLOWS_EVENTS,
            description="The fold's watermark: every event with seq up to it is folded into the two projection tables.",
        ),
    ],
    pool=POOL,
)
def resource_projection(context: dg.AssetExecutionContext, store: TallyStore):
    """Re-fold the resources touched since the last refresh (a late event re-folds its resource's history)."""
    rt = store.runtime
    result = projection.refresh(rt.store)
    context.log.info(f"re-folded {result.resources} resources up to event seq {result.watermark} in {result.seconds:.3f}s")
    snapshot = write_analyst_snapshot(context, rt)
    for key, metadata in projection_metadata(rt, result, "resource_projection").items():
        yield dg.MaterializeResult(asset_key=key, metadata={**metadata, **snapshot})
