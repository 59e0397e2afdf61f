"""Ingest as the UI sees it: landing-file batches (daily partitions), the event log, the dead letter."""

import dagster as dg

from tally_pipeline.defs.alerts.states import report
from tally_pipeline.defs.ingest.landing_folders import landing_files
from tally_pipeline.defs.ingest.metadata import cloud_activity_metadata, dead_letter_metadata, event_log_metadata
from tally_pipeline.orchestration.conditions import EVENT_LOG
from tally_pipeline.orchestration.metadata import md_table
from tally_pipeline.orchestration.partitions import DAILY
from tally_pipeline.orchestration.resources import TallyStore
from tally_pipeline.orchestration.tags import POOL


@dg.asset(
    group_name="ingest",
    kinds={"json"},
    partitions_def=DAILY,
    backfill_policy=dg.BackfillPolicy.single_run(),
    pool=POOL,
    description=(
        "Landing files of one UTC day (landing_dir/YYYY-MM-DD/*.jsonl[.gz] or {\"events\": [...]}) streamed "
        "through the ingest core. Re-materializing a day is safe: already stored events are duplicates. "
        "A file that stops early (truncated, not JSON, over the landing limits, a refused symlink) fails the run "
        "with its reason, after every other file is read."
    ),
)
def raw_event_batches(context: dg.AssetExecutionContext, store: TallyStore) -> None:
    landing_dir = store.config.landing_dir
    if landing_dir is None:
        raise dg.Failure("landing_dir is not set in the tally config: there are no landing files to ingest")
    stopped: list[str] = []
    for day in context.partition_keys:
        # A range (a backfill, the sensor's catch-up) is one run; each day's materialization
        # carries that day's own files and counts.
        totals = {"files": 0, "items": 0, "stored": 0, "duplicates": 0, "rejected": 0}
        reasons: dict[str, int] = {}
        rows = []
        for path in landing_files(landing_dir, day):
            summary = store.ingest_file(path)
            context.log.info(
                f"{path.name}: {summary.items} items, {summary.stored} stored, {summary.duplicates} duplicates, "
                f"{summary.rejected} rejected" + (f"; stopped: {summary.error}" if summary.error else "")
            )
            totals["files"] += 1
            for key in ("items", "stored", "duplicates", "rejected"):
                totals[key] += getattr(summary, key)
            for reason, n in (summary.reasons or {}).items():
                reasons[reason] = reasons.get(reason, 0) + n
            rows.append([path.name, summary.items, summary.stored, summary.duplicates, summary.rejected,
                         summary.error or ""])
            if summary.error:
                stopped.append(f"{day}/{path.name}: {summary.error}")
        context.add_asset_metadata(partition_key=day, metadata={
            **totals,
            "dagster/row_count": totals["stored"],
            "rejected_by_reason": dg.MetadataValue.json(reasons),
            "files_preview": md_table(["file", "items", "stored", "duplicates", "rejected", "error"], rows[:50]),
        })
    if stopped:
        # What was read before each stop is stored (and its refusals dead-lettered); the run still fails, so
        # a truncated or refused file is never a success.
        raise dg.Failure(f"{len(stopped)} landing file(s) stopped early: " + "; ".join(stopped[:10]),
                         metadata={"stopped": dg.MetadataValue.json(stopped[:100])})


@dg.multi_asset(
    specs=[
        dg.AssetSpec(
            "event_log", group_name="ingest", kinds={"duckdb", "postgres"}, deps=[raw_event_batches],
            automation_condition=EVENT_LOG,
            description=(
                "The event log (table events): one row per distinct event_id, written only by the ingest core — by "
                "the API, landing files and reconciliation. Materializing it records its counts; what the API and "
                "the syncs write is recorded as materializations too (api_writes sensor, each sync run)."
            ),
        ),
        dg.AssetSpec(
            "cloud_activity", group_name="ingest", kinds={"duckdb", "postgres"}, deps=[raw_event_batches],
            automation_condition=EVENT_LOG,
            description=(
                "Per cloud: first and last collector event stored, counts by source; kept by the ingest transaction. "
                "The events_silent alert reads it."
            ),
        ),
    ],
)
def event_log(context: dg.AssetExecutionContext, store: TallyStore):
    yield dg.MaterializeResult(asset_key="event_log", metadata=event_log_metadata(store))
    yield dg.MaterializeResult(asset_key="cloud_activity", metadata=cloud_activity_metadata(store))
    report(context, store, ["events_silent"])


@dg.asset(
    group_name="ingest",
    kinds={"duckdb", "postgres"},
    deps=[raw_event_batches],
    automation_condition=EVENT_LOG,
    description="The dead letter (table rejected_events): every refused item or body, with its reason and raw form.",
)
def dead_letter(store: TallyStore) -> dg.MaterializeResult:
    return dg.MaterializeResult(metadata=dead_letter_metadata(store))
