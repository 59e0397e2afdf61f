"""usage_daily: per cloud, project, meter and UTC day — daily partitions, backfilled in one run."""


from datetime import date, datetime, timedelta

import dagster as dg

from tally_pipeline.core.timeutil import to_utc
from tally_pipeline.defs.metadata import md_table
from tally_pipeline.defs.partitions import DAILY
from tally_pipeline.defs.resources import Clock, TallyStore
from tally_pipeline.defs.tags import POOL
from tally_pipeline.store import asset_reads


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
def usage_daily(context: dg.AssetExecutionContext, store: TallyStore, clock: dg.ResourceParam[Clock]) -> None:
    from tally_pipeline.defs.projection import refresh_and_report
    from tally_pipeline.ledger.daily import recompute_usage_daily

    rt = store.runtime
    window = context.partition_time_window
    first, last = window.start.date(), date.fromordinal(window.end.date().toordinal() - 1)
    refresh_and_report(context, rt, "usage_daily")  # usage counts every event stored before the run
    result = recompute_usage_daily(rt.store, rt.registry, first, last, through=clock.now())
    context.log.info(f"usage_daily {first}..{last}: {result.rows} rows, {len(result.skipped)} skipped")
    # A range backfill is one run but one materialization per day: each carries its own day's figures.
    by_day = asset_reads.usage_totals_by_day(rt.store, first, last)
    skipped: dict[date, int] = {}
    for s in result.skipped:
        skipped[s.day] = skipped.get(s.day, 0) + 1
    for key in context.partition_keys:
        day = date.fromisoformat(key)
        totals = by_day.get(day, {"rows": 0, "meters": {}})
        context.add_asset_metadata(partition_key=key, metadata={
            "dagster/row_count": totals["rows"],
            "day": key,
            "computed_in_run": f"{first}..{last}",
            "skipped": skipped.get(day, 0),
            "totals_by_meter": md_table(["meter", "quantity"], [[m, q] for m, q in totals["meters"].items()]),
        })


usage_daily_job = dg.define_asset_job("usage_daily_job", selection=[usage_daily],
                                      description="Recompute usage_daily for a day (or a range, in one run).")


def day_that_ended(tick: datetime) -> str:
    """The partition a nightly tick computes: the UTC day before the tick (00:30 on the 2nd → the 1st)."""
    return (to_utc(tick) - timedelta(days=1)).date().isoformat()


@dg.schedule(job=usage_daily_job, cron_schedule="30 0 * * *", execution_timezone="UTC",
             default_status=dg.DefaultScheduleStatus.RUNNING,
             description="Each night at 00:30 UTC, usage_daily for the UTC day that just ended.")
def usage_daily_schedule(context: dg.ScheduleEvaluationContext) -> dg.RunRequest:
    # build_schedule_from_partitioned_job would request the partition of the tick's own day (the
    # partitions end one day ahead, for today's landing files), i.e. 30 minutes of a new day.
    day = day_that_ended(context.scheduled_execution_time)
    return dg.RunRequest(run_key=day, partition_key=day)
