"""usage_daily's job, and the nightly schedule computing the UTC day that just ended."""

from datetime import datetime, timedelta

import dagster as dg

from tally_pipeline.core.timeutil import to_utc

usage_daily_job = dg.define_asset_job("usage_daily_job", selection=dg.AssetSelection.assets("usage_daily"),
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
