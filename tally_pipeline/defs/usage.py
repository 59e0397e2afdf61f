"""usage_daily: per cloud, project, meter and UTC day — daily partitions, backfilled in one run."""


from datetime import date

import dagster as dg

from tally_pipeline.defs.metadata import md_table
from tally_pipeline.defs.partitions import DAILY
from tally_pipeline.defs.resources import Clock, TallyStore
from tally_pipeline.defs.tags import POOL


@dg.asset(
    group_name="usage",
    kinds={"duckdb", "postgres"},
    partitions_def=DAILY,
    backfill_policy=dg.BackfillPolicy.single_run(),
    deps=["resource_intervals"],
    pool=POOL,
    description=(
        "Usage per (cloud, project, meter, UTC day), computed from resource_intervals. A partition is replaced "
        "whole (idempotent); a backfill over a range of days runs once and recomputes them together."
    ),
)
def usage_daily(context: dg.AssetExecutionContext, store: TallyStore, clock: dg.ResourceParam[Clock]) -> dg.MaterializeResult:
    from tally_pipeline import projection
    from tally_pipeline.ledger.daily import recompute_usage_daily

    rt = store.runtime
    window = context.partition_time_window
    first, last = window.start.date(), date.fromordinal(window.end.date().toordinal() - 1)
    projection.refresh(rt.store)  # usage counts every event stored before the run
    result = recompute_usage_daily(rt.store, rt.registry, first, last, through=clock.now())
    context.log.info(f"usage_daily {first}..{last}: {result.rows} rows, {len(result.skipped)} skipped")
    totals = rt.store.query(
        "SELECT meter, sum(quantity) FROM usage_daily WHERE day >= %s AND day <= %s GROUP BY meter ORDER BY meter",
        [first, last],
    )
    return dg.MaterializeResult(metadata={
        "dagster/row_count": result.rows,
        "days": f"{first}..{last}",
        "skipped": len(result.skipped),
        "totals_by_meter": md_table(["meter", "quantity"], [[m, q] for m, q in totals]),
    })


usage_daily_job = dg.define_asset_job("usage_daily_job", selection=[usage_daily],
                                      description="Recompute usage_daily for a day (or a range, in one run).")
usage_daily_schedule = dg.build_schedule_from_partitioned_job(
    usage_daily_job, hour_of_day=0, minute_of_hour=30, default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Each night, the day that just ended.",
)
