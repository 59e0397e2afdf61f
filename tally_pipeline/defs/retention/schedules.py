"""The dead letter's retention, applied daily."""

import dagster as dg

from tally_pipeline.defs.retention.jobs import dead_letter_retention

dead_letter_retention_schedule = dg.ScheduleDefinition(
    job=dead_letter_retention, cron_schedule="40 3 * * *", execution_timezone="UTC",
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Every day at 03:40 UTC, delete dead-letter rows past their retention.",
)
