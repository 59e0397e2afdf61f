"""Per-cloud reconciliation: sync_runs and sync_deferrals partitioned by configured cloud, its job,
schedule and follow-ups. They are built from the cloud list, by ``definitions.py`` when Dagster loads
the code location (the clouds are the config file's unless the location names them).
"""

from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

import dagster as dg

from tally_pipeline.core.timeutil import format_rfc3339, parse_rfc3339, to_utc
from tally_pipeline.defs.reconciliation.requests import follow_up_requests, reconciliation_requests
from tally_pipeline.orchestration.alert_states import SYNC_CHECKS, report
from tally_pipeline.orchestration.failures import cause_first, outage_guarded
from tally_pipeline.orchestration.location import config_changes
from tally_pipeline.orchestration.metadata import md_table
from tally_pipeline.orchestration.partitions import cloud_partitions
from tally_pipeline.orchestration.projection_refresh import report_refresh
from tally_pipeline.orchestration.resources import AdapterSource, Clock, TallyStore
from tally_pipeline.orchestration.snapshot import write_analyst_snapshot
from tally_pipeline.orchestration.table_metadata import cloud_activity_metadata, event_log_metadata
from tally_pipeline.orchestration.tags import CLOUD, POLL_TIME, POOL, RUN_KEY, SYNC_RUN_ID, SYNC_STATUS


def worst(statuses: Iterable[str]) -> str:
    """The run's sync outcome over its clouds: failed, else partial, else succeeded."""
    found = set(statuses)
    return next((s for s in ("failed", "partial") if s in found), "succeeded")


def reconcile_partitions(context: dg.AssetExecutionContext, store: TallyStore, adapters: AdapterSource, clock: Clock,
                         clouds: Sequence[str]) -> Iterator[dg.AssetObservation | dg.MaterializeResult[Any]]:
    """The body of the ``sync_runs`` asset: one reconciliation per cloud partition of the run, recorded as
    the two assets' metadata; a failed cloud fails the run, a partial one fails it after recording
    what was reconciled (docs/operations.md, "Partial syncs"). ``clouds``: the location's clouds."""
    from tally_pipeline.services.errors import SyncInProgress

    tags = context.run.tags
    poll_time = parse_rfc3339(tags[POLL_TIME]) if POLL_TIME in tags else to_utc(clock.now())
    run_key = tags.get(RUN_KEY) or f"dagster:{context.run.run_id}"
    header = ["type", "status", "listed", "corrections", "deferred", "reason"]
    failures, partial, statuses = [], [], {}
    if CLOUD not in tags and len(context.partition_keys) == 1:
        # A run launched from the UI's Materialize or GraphQL has no tally/cloud tag (only
        # dagster/partition, which deploy/embedded/dagster.yaml also limits): add it first, so every run
        # names its cloud, the one that fails at its configuration too.
        context.instance.add_run_tags(context.run.run_id, {CLOUD: context.partition_keys[0]})
    for cloud in context.partition_keys:
        reason = store.config.misconfigured_clouds.get(cloud)
        if reason is not None:  # fail at once, the reason first (the other clouds are unaffected)
            raise dg.Failure(f"cloud {cloud!r} is misconfigured: {reason}")
        if cloud not in store.config.clouds and cloud not in clouds:
            raise dg.Failure(f"cloud {cloud!r} is not configured")
    watermark = store.projection_watermark()
    events = store.event_count()
    reserved = tags.get(SYNC_RUN_ID)  # POST /internal/sync/{cloud} reserved this run, then launched this job
    if reserved and len(context.partition_keys) != 1:
        raise dg.Failure(f"run tag {SYNC_RUN_ID} names one sync, for one cloud partition")
    for cloud in context.partition_keys:
        try:
            run = store.sync(cloud, adapters.adapter(cloud), now=poll_time, run_key=run_key, run_id=reserved)
        except SyncInProgress as exc:
            raise dg.Failure(str(exc)) from exc
        log = context.log.warning if run.status != "succeeded" else context.log.info
        log(f"{cloud}: {run.status}; created {run.created}, updated {run.updated}, deleted {run.deleted}, "
            f"recovered {run.recovered}, deferred {run.deferred}; drift {(run.drift or 0.0):.2%}"
            + (f"; {run.error}" if run.error else ""))
        rows = [[rtype, o.status, o.listed, o.corrections, o.deferred, (o.reason or "")[:80]]
                for rtype, o in run.per_type.items()]
        statuses[cloud] = run.status
        if run.status == "failed":
            failures.append((cloud, run.error, rows))
            continue
        if run.status == "partial":
            partial.append((cloud, run.error, rows))
        context.add_asset_metadata(asset_key="sync_runs", partition_key=cloud, metadata={
            "status": run.status, "created": run.created, "updated": run.updated, "deleted": run.deleted,
            "recovered": run.recovered, "deferred": run.deferred,
            "poll_time": format_rfc3339(poll_time), "run_key": run_key, "sync_run_id": run.run_id,
            "drift": dg.MetadataValue.text(f"{(run.drift or 0.0):.2%}"), "live_before": run.live_before,
            "late": run.late,  # corrections that settled late deliveries: not in drift (docs/reconciliation.md)
            "per_type": md_table(header, rows),
            # what dated the status and size corrections: nova's actions, the platform's updated, the poll
            "dated_by": dg.MetadataValue.json(run.dated_by()),
        })
        context.add_asset_metadata(asset_key="sync_deferrals", partition_key=cloud, metadata={
            "dagster/row_count": run.deferred, "sync_run_id": run.run_id,
            "by_reason": dg.MetadataValue.json(run.deferrals_by_reason()),
        })
    # The analyst snapshot holds what the syncs wrote; each materialization this run reports says so.
    snapshot = write_analyst_snapshot(context, store)
    for cloud, status in statuses.items():
        if status != "failed":
            context.add_asset_metadata(asset_key="sync_runs", partition_key=cloud, metadata=snapshot)
            context.add_asset_metadata(asset_key="sync_deferrals", partition_key=cloud, metadata=snapshot)
    # The sync wrote events and re-folded the projection inside its body: record both.
    wrote_events = store.event_count() != events
    if wrote_events:
        context.log_event(dg.AssetMaterialization(asset_key="event_log", metadata={
            **event_log_metadata(store), "written_by": f"sync_runs ({', '.join(context.partition_keys)})", **snapshot}))
        context.log_event(dg.AssetMaterialization(asset_key="cloud_activity",
                                                  metadata={**cloud_activity_metadata(store), **snapshot}))
    if store.projection_watermark() != watermark:
        report_refresh(context, store, None, f"sync_runs ({', '.join(context.partition_keys)})", snapshot)
    # Every sync changes what the sync checks see: report them in this run, next to its materialization.
    report(context, store, [*SYNC_CHECKS, *(["events_silent"] if wrote_events else [])])
    # The run list shows each sync's outcome as a tag (filterable: tally/sync_status=partial).
    context.instance.add_run_tags(context.run.run_id, {SYNC_STATUS: worst(statuses.values())})
    if failures:
        # Yielding the failed clouds' observations also hands Dagster the events logged above
        # (they are flushed with the next yielded event; a raise alone would drop them).
        for cloud, error, rows in failures:
            yield dg.AssetObservation(asset_key="sync_runs", partition=cloud, metadata={
                "status": "failed", "error": error or "", "per_type": md_table(header, rows)})
        raise dg.Failure("reconciliation failed: " + "; ".join(f"{c}: {e}" for c, e, _ in failures),
                         metadata={"per_type": md_table(["cloud", *header],
                                                        [[c, *r] for c, _, rows in failures for r in rows])})
    yield dg.MaterializeResult(asset_key="sync_runs")
    yield dg.MaterializeResult(asset_key="sync_deferrals")
    if partial:
        # Partial is not success (docs/operations.md, "Partial syncs"): what was reconciled is recorded
        # above as the materialization, then the run fails, its reason first.
        raise dg.Failure("partial sync: " + "; ".join(f"{c}: {e or 'some types not reconciled'}"
                                                      for c, e, _ in partial),
                         metadata={"per_type": md_table(["cloud", *header],
                                                        [[c, *r] for c, _, rows in partial for r in rows])})


def reconciliation_defs(clouds: list[str]) -> dg.Definitions:
    """The reconciliation asset, job, schedule and settle-window sensor for ``clouds``."""
    partitions = cloud_partitions(clouds)

    @dg.multi_asset(
        specs=[
            dg.AssetSpec(
                "sync_runs", group_name="reconciliation", partitions_def=partitions,
                deps=["current_resources", "resource_intervals"],  # the diff reads the projection
                description=(
                    "One reconciliation run per cloud partition: list the platform, diff against the projection, "
                    "write sync.* corrections through the ingest core (recorded as materializations of event_log and of "
                    "the projections it re-folds), record sync_runs and sync_deferrals "
                    "(docs/reconciliation.md). The run key and poll time come from the schedule's tick."
                ),
            ),
            dg.AssetSpec(
                "sync_deferrals", group_name="reconciliation", partitions_def=partitions,
                deps=["current_resources", "resource_intervals"],  # the same diff decides what it defers
                description=(
                    "What each sync deferred instead of correcting (in transition, inside the settle window, held by "
                    "the mass-delete guard, unconfirmed), with when a follow-up may book it."
                ),
            ),
        ],
        # "All" partitions (a backfill from the UI or GraphQL) starts one run per cloud, so each run
        # carries its cloud and the per-cloud run limit applies.
        backfill_policy=dg.BackfillPolicy.multi_run(1),
        pool=POOL,
    )
    def sync_runs(context: dg.AssetExecutionContext, store: TallyStore, adapters: dg.ResourceParam[AdapterSource],
                  clock: dg.ResourceParam[Clock]) -> Iterator[dg.AssetObservation | dg.MaterializeResult[Any]]:
        try:
            with cause_first():  # a database that refuses us says why, first
                yield from reconcile_partitions(context, store, adapters, clock, clouds)
        except Exception:
            # A run that failed before its outcome was known (misconfigured, the database down): the
            # sync did not happen, and the run list says so like any other sync's outcome.
            if SYNC_STATUS not in context.instance.get_run_by_id(context.run.run_id).tags:
                context.instance.add_run_tags(context.run.run_id, {SYNC_STATUS: "failed"})
            raise

    # The alert checks on sync_runs are reported by their sensors every minute; running them as extra
    # steps of every 10-minute sync would only slow each run down.
    job = dg.define_asset_job("reconciliation", selection=dg.AssetSelection.assets(sync_runs).without_checks(),
                              description="Reconcile one cloud (one partition per configured cloud).")

    @dg.schedule(job=job, cron_schedule="*/10 * * * *", execution_timezone="UTC",
                 default_status=dg.DefaultScheduleStatus.RUNNING,
                 description="Every 10 minutes, one reconciliation run per configured cloud.")
    def reconciliation_schedule(context: dg.ScheduleEvaluationContext) -> list[dg.RunRequest]:
        return reconciliation_requests(clouds, context.scheduled_execution_time)

    @dg.sensor(job=job, minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING,
               description="Starts a follow-up sync for a cloud as soon as its deferrals' settle window has passed.")
    def settle_window_sensor(context: dg.SensorEvaluationContext, store: TallyStore
                             ) -> list[dg.RunRequest] | dg.SkipReason:
        return outage_guarded(context, "settle_window_sensor", lambda: _follow_ups(context, store))

    def _follow_ups(context: dg.SensorEvaluationContext, store: TallyStore) -> list[dg.RunRequest] | dg.SkipReason:
        changed = config_changes(store.config, clouds)
        if (changed or "") != (context.cursor or ""):  # say it once per change: only a reload applies it
            if changed:
                context.log.warning(changed)
            context.update_cursor(changed or "")
        now = datetime.now(UTC)
        requests = follow_up_requests(store.due_follow_ups(now), clouds, now)
        for request in requests:
            context.log.info(f"follow-up sync for {request.partition_key}: deferrals are ready ({request.run_key})")
        return requests or dg.SkipReason("no deferral has passed its settle window" + (f"; {changed}" if changed else ""))

    return dg.Definitions(assets=[sync_runs], jobs=[job], schedules=[reconciliation_schedule],
                          sensors=[settle_window_sensor])

