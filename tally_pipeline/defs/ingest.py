"""Ingest as the UI sees it: landing-file batches (daily partitions), the event log, the dead letter."""


import hashlib
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import dagster as dg

from tally_pipeline.defs import alerts
from tally_pipeline.defs.automation import EVENT_LOG
from tally_pipeline.defs.metadata import md_table
from tally_pipeline.defs.partitions import DAILY
from tally_pipeline.defs.resources import TallyStore
from tally_pipeline.defs.tags import POOL
from tally_pipeline.landing import LandingPathError, ingest_file, resolve_landing_path
from tally_pipeline.store import asset_reads

LANDING_SUFFIXES = (".jsonl", ".json", ".ndjson", ".jsonl.gz", ".json.gz", ".ndjson.gz")


def landing_files(landing_dir: Path, day: str) -> list[Path]:
    """The files of one day's folder ``landing_dir/YYYY-MM-DD/``, never anything outside ``landing_dir``."""
    try:
        folder = resolve_landing_path(landing_dir, day)
    except LandingPathError:
        return []
    if not folder.is_dir():
        return []
    files = []
    for path in sorted(folder.iterdir()):
        try:
            real = resolve_landing_path(landing_dir, path)
        except LandingPathError:
            continue  # a symlink out of the landing directory is never read
        if real.is_file() and path.name.endswith(LANDING_SUFFIXES):
            files.append(real)
    return files


@dg.asset(
    group_name="ingest",
    kinds={"json"},
    partitions_def=DAILY,
    backfill_policy=dg.BackfillPolicy.single_run(),
    pool=POOL,
    description=(
        "Landing files of one UTC day (landing_dir/YYYY-MM-DD/*.jsonl[.gz] or {\"events\": [...]}) streamed "
        "through the ingest core. Re-materializing a day is safe: already stored events are duplicates."
    ),
)
def raw_event_batches(context: dg.AssetExecutionContext, store: TallyStore) -> None:
    rt = store.runtime
    if rt.config.landing_dir is None:
        raise dg.Failure("landing_dir is not set in the tally config: there are no landing files to ingest")
    with rt.store.session():
        for day in context.partition_keys:
            # A range (a backfill, the sensor's catch-up) is one run; each day's materialization
            # carries that day's own files and counts.
            totals = {"files": 0, "items": 0, "stored": 0, "duplicates": 0, "rejected": 0}
            reasons: dict[str, int] = {}
            rows = []
            for path in landing_files(rt.config.landing_dir, day):
                summary = ingest_file(rt.ingestor, path)
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
            context.add_asset_metadata(partition_key=day, metadata={
                **totals,
                "dagster/row_count": totals["stored"],
                "rejected_by_reason": dg.MetadataValue.json(reasons),
                "files_preview": md_table(["file", "items", "stored", "duplicates", "rejected", "error"], rows[:50]),
            })


def event_log_metadata(rt: Any) -> dict[str, Any]:
    rows = asset_reads.cloud_activity(rt.store)
    return {
        "dagster/row_count": rt.store.event_count(),
        "by_cloud": md_table(
            ["cloud", "collector events", "reconciliation events", "last collector event"],
            [[c, n, m, t.isoformat() if t else "never"] for c, n, m, t in rows],
        ),
        "reconciliation_events": sum(r[2] for r in rows),
    }


def dead_letter_metadata(rt: Any) -> dict[str, Any]:
    by_reason = asset_reads.rejected_by_reason(rt.store)
    newest = rt.store.rejected(limit=10)
    return {
        "dagster/row_count": sum(n for _, n in by_reason),
        "by_reason": md_table(["reason", "rows"], [[r, n] for r, n in by_reason]),
        "newest": md_table(["received_at", "reason", "cloud", "message"],
                            [[e.received_at.isoformat(), e.reason, e.cloud or "", e.message[:120]] for e in newest]),
    }


def cloud_activity_metadata(rt: Any) -> dict[str, Any]:
    rows = asset_reads.cloud_activity(rt.store)
    # A configured cloud with no event at all has no row; events_silent never fires for it, so say so here.
    quiet = sorted({c for c, n, _, _ in rows if not n} | (set(rt.config.clouds) - {r[0] for r in rows}))
    return {
        "dagster/row_count": len(rows),
        "clouds": md_table(["cloud", "collector events", "reconciliation events", "last collector event"],
                           [[c, n, m, t.isoformat() if t else "never"] for c, n, m, t in rows]),
        "never_sent_a_collector_event": ", ".join(quiet) or "none",
    }


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
    rt = store.runtime
    yield dg.MaterializeResult(asset_key="event_log", metadata=event_log_metadata(rt))
    yield dg.MaterializeResult(asset_key="cloud_activity", metadata=cloud_activity_metadata(rt))
    alerts.report(context, store, ["events_silent"])


@dg.asset(
    group_name="ingest",
    kinds={"duckdb", "postgres"},
    deps=[raw_event_batches],
    automation_condition=EVENT_LOG,
    description="The dead letter (table rejected_events): every refused item or body, with its reason and raw form.",
)
def dead_letter(store: TallyStore) -> dg.MaterializeResult:
    return dg.MaterializeResult(metadata=dead_letter_metadata(store.runtime))


# Every 30 s, with the automation sensor's 30 s, a write through the API reaches the projections within a
# minute. The writes are recorded as (runless) materializations, not observations: the rows really were
# written, and declarative automation reacts to a materializable asset's materializations only.
@dg.sensor(minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING,
           description="Records what the API wrote since the last look as materializations of event_log, cloud_activity "
                       "and dead_letter (with the events_silent check); automation then refreshes the projections.")
def api_writes(context: dg.SensorEvaluationContext, store: TallyStore) -> dg.SensorResult | dg.SkipReason:
    rt = store.runtime
    events = rt.store.event_count()
    rejected = asset_reads.rejected_count(rt.store)
    cursor = f"{events}:{rejected}"
    if cursor == context.cursor:
        return dg.SkipReason(f"nothing new: {events} events, {rejected} rejected")
    before = [int(n) for n in context.cursor.split(":")] if context.cursor else [-1, -1]
    context.update_cursor(cursor)
    written: list = []
    # A sync or a landing run already records its own writes; record only a count nobody recorded, so
    # automation does not start a projection run for writes the projection already folded.
    latest = context.instance.get_latest_materialization_event(dg.AssetKey("event_log"))
    recorded = latest.asset_materialization.metadata.get("dagster/row_count") if latest else None
    if events != before[0] and (recorded is None or recorded.value != events):
        written += [
            dg.AssetMaterialization("event_log", metadata={
                **event_log_metadata(rt), "recorded_by": "api_writes sensor: the count changed since its last look"}),
            dg.AssetMaterialization("cloud_activity", metadata=cloud_activity_metadata(rt)),
            *[alerts.evaluation(s) for s in alerts.states(store, ["events_silent"])],
        ]
    if rejected != before[1]:
        written.append(dg.AssetMaterialization("dead_letter", metadata=dead_letter_metadata(rt)))
    return dg.SensorResult(asset_events=written)


landing_job = dg.define_asset_job("landing_files", selection=[raw_event_batches])


def file_signature(path: Path) -> str:
    """What identifies one landing file's content cheaply: inode, size and modification time.

    A copy that keeps its old timestamps (``cp -p``, ``rsync -a``, ``mv``) is still a new path or a
    new inode, so it is seen; rewriting a file in place changes its size or time.
    """
    st = path.stat()
    return f"{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"


def read_landing_cursor(cursor: str | None, landing_dir: Path) -> dict[str, str]:
    """The files seen so far, as ``{"YYYY-MM-DD/name": signature}``."""
    if not cursor:
        return {}
    try:
        seen = json.loads(cursor)
    except ValueError:
        seen = None
    if isinstance(seen, dict):
        return {str(k): str(v) for k, v in seen.items()}
    # The former cursor was the newest modification time seen: take every file at or before it as
    # seen, so an upgrade does not re-ingest the whole landing directory (it would be safe, only slow).
    try:
        since = float(cursor)
    except ValueError:
        return {}
    out = {}
    for folder in sorted(p for p in landing_dir.iterdir() if p.is_dir()):
        for f in landing_files(landing_dir, folder.name):
            if f.stat().st_mtime <= since:
                out[f"{folder.name}/{f.name}"] = file_signature(f)
    return out


@dg.sensor(job=landing_job, minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING,
           description="Starts a landing_files run for each day folder with files it has not seen (new or changed).")
def landing_files_sensor(context: dg.SensorEvaluationContext, store: TallyStore) -> dg.SensorResult | dg.SkipReason:
    landing_dir = store.runtime.config.landing_dir
    if landing_dir is None or not landing_dir.is_dir():
        return dg.SkipReason("no landing_dir configured (or it does not exist)")
    seen = read_landing_cursor(context.cursor, landing_dir)
    current: dict[str, str] = {}
    requests = []
    today = datetime.now(UTC).date()
    for folder in sorted(p for p in landing_dir.iterdir() if p.is_dir()):
        try:
            day = datetime.strptime(folder.name, "%Y-%m-%d").date()
        except ValueError:
            context.log.warning(f"ignoring {folder}: landing folders are named YYYY-MM-DD")
            continue
        if day > today + timedelta(days=1):
            context.log.warning(f"not yet ingesting {folder}: its day is in the future (partitions end tomorrow)")
            continue
        changed = []
        for f in landing_files(landing_dir, folder.name):
            key = f"{folder.name}/{f.name}"
            current[key] = file_signature(f)
            if seen.get(key) != current[key]:
                changed.append(f"{key}={current[key]}")
        if changed:
            context.log.info(f"{folder.name}: {len(changed)} new or changed file(s)")
            digest = hashlib.sha256("\n".join(changed).encode()).hexdigest()[:16]
            requests.append(dg.RunRequest(run_key=f"{folder.name}@{digest}", partition_key=folder.name))
    # The cursor holds exactly the files present now, so it does not grow with deleted files.
    if current != seen:
        context.update_cursor(json.dumps(current, sort_keys=True, separators=(",", ":")))
    if not requests:
        return dg.SkipReason(f"no new landing files ({len(current)} seen)")
    return dg.SensorResult(run_requests=requests)
