"""What starts ingest runs or records ingest writes: new landing files, and the API's writes."""

import hashlib
import json
from datetime import UTC, datetime, timedelta

import dagster as dg

from tally_pipeline.defs.ingest.jobs import landing_job
from tally_pipeline.defs.ingest.landing_folders import file_signature, landing_files, read_landing_cursor
from tally_pipeline.orchestration.alert_states import evaluation, states
from tally_pipeline.orchestration.failures import outage_guarded
from tally_pipeline.orchestration.projection_refresh import PROJECTION_REFRESH_JOB
from tally_pipeline.orchestration.resources import TallyStore
from tally_pipeline.orchestration.table_metadata import (
    cloud_activity_metadata,
    dead_letter_metadata,
    event_log_metadata,
)

# Cursor keys of folders the sensor leaves alone (a file's key is "YYYY-MM-DD/name", never this).
IGNORED = "ignored:"


# Every 30 s: a write through the API reaches the projections within 30 s and the refresh run's own time. The
# writes are recorded as (runless) materializations, not observations: the rows really were written. The sensor
# starts the projections' refresh itself rather than leave it to automation's eager(): when a projection run ends
# in the same automation tick as a write is recorded, eager() lets the projection's own update cancel its
# dependency's, and the write would wait for the next one. A run started after the count was taken folds what it
# counted. (Automation starts no second run: the sensor's is in progress at its next tick, or ended within it,
# which resets it.)
@dg.sensor(job_name=PROJECTION_REFRESH_JOB, minimum_interval_seconds=30,
           default_status=dg.DefaultSensorStatus.RUNNING,
           description="Records what the API wrote since the last look as materializations of event_log, cloud_activity "
                       "and dead_letter (with the events_silent check), and starts a refresh of the projections when "
                       "events were written.")
def api_writes_sensor(context: dg.SensorEvaluationContext, store: TallyStore) -> dg.SensorResult | dg.SkipReason:
    return outage_guarded(context, "api_writes_sensor", lambda: _api_writes(context, store))


def _api_writes(context: dg.SensorEvaluationContext, store: TallyStore) -> dg.SensorResult | dg.SkipReason:
    events = store.event_count()
    rejected = store.rejected_count()
    cursor = f"{events}:{rejected}"
    if cursor == context.cursor:
        return dg.SkipReason(f"nothing new: {events} events, {rejected} rejected")
    before = [int(n) for n in context.cursor.split(":")] if context.cursor else [-1, -1]
    context.update_cursor(cursor)
    written: list[dg.AssetMaterialization | dg.AssetCheckEvaluation] = []
    refresh: list[dg.RunRequest] = []
    # A sync or a landing run already records its own writes; record only a count nobody recorded, so
    # the API is not credited with them and no projection run starts for writes already folded or on their way.
    latest = context.instance.get_latest_materialization_event(dg.AssetKey("event_log"))
    materialization = latest.asset_materialization if latest else None
    recorded = materialization.metadata.get("dagster/row_count") if materialization else None
    if events != before[0] and (recorded is None or recorded.value != events):
        written += [
            dg.AssetMaterialization("event_log", metadata={
                **event_log_metadata(store), "recorded_by": "api_writes_sensor: the count changed since its last look"}),
            dg.AssetMaterialization("cloud_activity", metadata=cloud_activity_metadata(store)),
            *[evaluation(s) for s in states(store, ["events_silent"])],
        ]
        if events:  # an empty log (a new deployment's first look) has nothing to fold: automation fills it in
            refresh.append(dg.RunRequest(run_key=f"api-writes:{cursor}"))
    latest_rejected = context.instance.get_latest_materialization_event(dg.AssetKey("dead_letter"))
    rejected_materialization = latest_rejected.asset_materialization if latest_rejected else None
    recorded_rejected = (rejected_materialization.metadata.get("dagster/row_count")
                         if rejected_materialization else None)
    if rejected != before[1] and (recorded_rejected is None or recorded_rejected.value != rejected):
        written.append(dg.AssetMaterialization("dead_letter", metadata={
            **dead_letter_metadata(store), "recorded_by": "api_writes_sensor: the count changed since its last look"}))
    summary = f"recorded {len(written)} asset events: {events} events, {rejected} rejected"
    if refresh:  # a tick that starts a run shows the run, not a skip reason: the summary goes to its log
        context.log.info(summary)
        return dg.SensorResult(asset_events=written, run_requests=refresh)
    return dg.SensorResult(asset_events=written, skip_reason=summary)


def _note(context: dg.SensorEvaluationContext, seen: dict[str, str], current: dict[str, str], folder: str,
          warning: str) -> None:
    """Warn about a folder the sensor leaves alone once, not on every tick: the cursor remembers it."""
    key = f"{IGNORED}{folder}"
    current[key] = warning
    if seen.get(key) != warning:
        context.log.warning(warning)


@dg.sensor(job=landing_job, minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING,
           description="Starts a landing_files run for each day folder with files it has not seen (new or changed).")
def landing_files_sensor(context: dg.SensorEvaluationContext, store: TallyStore) -> dg.SensorResult | dg.SkipReason:
    return outage_guarded(context, "landing_files_sensor", lambda: _landing_files(context, store))


def _landing_files(context: dg.SensorEvaluationContext, store: TallyStore) -> dg.SensorResult | dg.SkipReason:
    landing_dir = store.config.landing_dir
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
            _note(context, seen, current, folder.name, f"ignoring {folder}: landing folders are named YYYY-MM-DD")
            continue
        if day > today + timedelta(days=1):
            _note(context, seen, current, folder.name,
                  f"not yet ingesting {folder}: its day is in the future (partitions end tomorrow)")
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
        files = sum(1 for key in current if not key.startswith(IGNORED))
        return dg.SkipReason(f"no new landing files ({files} seen)")
    return dg.SensorResult(run_requests=requests)
