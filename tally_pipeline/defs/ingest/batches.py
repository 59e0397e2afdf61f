"""The landing-file batches (daily partitions), built by ``definitions.py`` when the code location loads:
the partitions start at the config's ``first_day``."""

from collections.abc import Mapping
from typing import Any

import dagster as dg

from tally_pipeline.defs.ingest.landing_folders import landing_files
from tally_pipeline.orchestration.alert_states import report
from tally_pipeline.orchestration.failures import cause_first
from tally_pipeline.orchestration.metadata import md_table
from tally_pipeline.orchestration.projection_refresh import report_refresh
from tally_pipeline.orchestration.resources import TallyStore
from tally_pipeline.orchestration.snapshot import write_analyst_snapshot
from tally_pipeline.orchestration.table_metadata import (
    cloud_activity_metadata,
    dead_letter_metadata,
    event_log_metadata,
)
from tally_pipeline.orchestration.tags import POOL


def raw_event_batches_asset(partitions: dg.DailyPartitionsDefinition) -> dg.AssetsDefinition:
    @dg.asset(
        group_name="ingest",
        kinds={"json"},
        partitions_def=partitions,
        backfill_policy=dg.BackfillPolicy.single_run(),
        pool=POOL,
        description=(
            "Landing files of one UTC day (landing_dir/YYYY-MM-DD/*.jsonl[.gz] or {\"events\": [...]}) streamed "
            "through the ingest core, then folded into the projection. Re-materializing a day is safe: already "
            "stored events are duplicates. "
            "A file that stops early (truncated, not JSON, over the landing limits, a refused symlink) fails the run "
            "with its reason, after every other file is read."
        ),
    )
    def raw_event_batches(context: dg.AssetExecutionContext, store: TallyStore) -> None:
        with cause_first():  # the run failure leads with the cause (orchestration/failures.py)
            landing_dir = store.config.landing_dir
            if landing_dir is None:
                raise dg.Failure("landing_dir is not set in the tally config: there are no landing files to ingest")
            events, rejected = store.event_count(), store.rejected_count()
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
            # The run folds what it wrote, as a sync does, rather than leave it to automation: eager() loses an
            # event_log update that lands in the same tick as a projection run's end (docs/operations.md).
            folded = store.refresh_projection()
            snapshot = write_analyst_snapshot(context, store)  # what the files wrote, before any stop fails the run
            for day in context.partition_keys:
                context.add_asset_metadata(partition_key=day, metadata=snapshot)
            by = f"landing_files ({', '.join(context.partition_keys)})"
            record_writes(context, store, events, rejected, by, snapshot)
            if folded.resources:
                report_refresh(context, store, folded, by, snapshot)
            if stopped:
                # What was read before each stop is stored (and its refusals dead-lettered, its writes recorded
                # above); the run still fails, so a truncated or refused file is never a success.
                raise dg.Failure(f"{len(stopped)} landing file(s) stopped early: " + "; ".join(stopped[:10]),
                                 metadata={"stopped": dg.MetadataValue.json(stopped[:100])})

    return raw_event_batches


def record_writes(context: dg.AssetExecutionContext, store: TallyStore, events: int, rejected: int, by: str,
                  snapshot: Mapping[str, Any] | None = None) -> None:
    """Record what this run wrote into the ingest tables as their materializations (so the api_writes
    sensor does not credit them to the API, and automation need not start a run to record them);
    ``snapshot``: the analyst snapshot's metadata, when the run wrote one after these writes."""
    extra = dict(snapshot or {})
    if store.event_count() != events:
        context.log_event(dg.AssetMaterialization("event_log", metadata={**event_log_metadata(store), "written_by": by,
                                                                         **extra}))
        context.log_event(dg.AssetMaterialization("cloud_activity", metadata={**cloud_activity_metadata(store), **extra}))
        report(context, store, ["events_silent"])
    if store.rejected_count() != rejected:
        context.log_event(dg.AssetMaterialization("dead_letter", metadata={**dead_letter_metadata(store), "written_by": by,
                                                                           **extra}))
