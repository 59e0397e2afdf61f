"""Dead-letter retention: the job deleting rows older than ``dead_letter.retention_days``."""

import dagster as dg

from tally_pipeline.core.timeutil import to_utc
from tally_pipeline.orchestration.resources import Clock, TallyStore
from tally_pipeline.orchestration.snapshot import write_analyst_snapshot


@dg.op(description="Delete dead-letter rows last received more than dead_letter.retention_days ago.")
def purge_dead_letter_op(context: dg.OpExecutionContext, store: TallyStore, clock: dg.ResourceParam[Clock]) -> int:
    result = store.purge_dead_letter(to_utc(clock.now()))
    snapshot = write_analyst_snapshot(context, store) if result.deleted else {}  # rejected_events changed
    context.add_output_metadata({"deleted": result.deleted, "cutoff": result.as_json()["cutoff"], **snapshot})
    context.log.info(f"dead letter: {result.deleted} rows received before {result.as_json()['cutoff']} deleted")
    return result.deleted


@dg.job(description="Apply the dead letter's retention (dead_letter.retention_days, default 30).",
        tags={"dagster/max_retries": "0"})
def dead_letter_retention() -> None:
    purge_dead_letter_op()
