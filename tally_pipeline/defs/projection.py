"""The projections as assets: folded from the event log, kept fresh by declarative automation."""


import dagster as dg

from tally_pipeline import projection
from tally_pipeline.defs.ingest import event_log
from tally_pipeline.defs.metadata import md_table
from tally_pipeline.defs.resources import TallyStore
from tally_pipeline.defs.tags import POOL


@dg.multi_asset(
    specs=[
        dg.AssetSpec(
            "current_resources", group_name="projection", kinds={"duckdb", "postgres"}, deps=[event_log],
            automation_condition=dg.AutomationCondition.eager(),
            description="One row per resource: live, deleted or unborn, with project, size, lifecycle times.",
        ),
        dg.AssetSpec(
            "resource_intervals", group_name="projection", kinds={"duckdb", "postgres"}, deps=[event_log],
            automation_condition=dg.AutomationCondition.eager(),
            description="Each resource's lifecycle: [start, end) intervals with project and size (docs/projection.md).",
        ),
    ],
    pool=POOL,
)
def resource_projection(context: dg.AssetExecutionContext, store: TallyStore):
    """Re-fold the resources touched since the last refresh (a late event re-folds its resource's history)."""
    rt = store.runtime
    result = projection.refresh(rt.store)
    context.log.info(f"re-folded {result.resources} resources up to event seq {result.watermark} in {result.seconds:.3f}s")
    live = rt.store.query(
        "SELECT cloud, resource_type, count(*) FROM current_resources WHERE status = 'live' "
        "GROUP BY cloud, resource_type ORDER BY cloud, resource_type"
    )
    statuses = dict(rt.store.query("SELECT status, count(*) FROM current_resources GROUP BY status"))
    intervals = rt.store.query("SELECT count(*), count(*) - count(end_at) FROM resource_intervals")[0]
    yield dg.MaterializeResult(
        asset_key="current_resources",
        metadata={
            "dagster/row_count": sum(statuses.values()),
            "refolded_resources": result.resources,
            "watermark_seq": result.watermark,
            "live": statuses.get("live", 0),
            "deleted": statuses.get("deleted", 0),
            "unborn": statuses.get("unborn", 0),
            "live_by_cloud_and_type": md_table(["cloud", "type", "live"], [list(r) for r in live]),
        },
    )
    yield dg.MaterializeResult(
        asset_key="resource_intervals",
        metadata={"dagster/row_count": intervals[0], "open_intervals": intervals[1],
                  "refresh_seconds": round(result.seconds, 4)},
    )
