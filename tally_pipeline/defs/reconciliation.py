"""Per-cloud reconciliation: an asset partitioned by configured cloud, its job, schedule and follow-ups."""


from datetime import UTC, datetime

import dagster as dg

from tally_pipeline.core.timeutil import format_rfc3339, parse_rfc3339, to_utc
from tally_pipeline.defs.metadata import md_table
from tally_pipeline.defs.resources import AdapterSource, Clock, TallyStore
from tally_pipeline.defs.tags import CLOUD, POLL_TIME, POOL, RUN_KEY


def build(clouds: list[str], partitions: dg.PartitionsDefinition) -> dict[str, list]:
    """The reconciliation asset, job, schedule and settle-window sensor for the configured clouds."""

    @dg.asset(
        name="sync_runs",
        group_name="reconciliation",
        kinds={"openstack", "python"},
        partitions_def=partitions,
        backfill_policy=dg.BackfillPolicy.single_run(),
        pool=POOL,
        description=(
            "One reconciliation run per cloud partition: list the platform, diff against the projection, write "
            "sync.* corrections through the ingest core, record sync_runs and sync_deferrals "
            "(docs/reconciliation.md). The run key and poll time come from the schedule's tick."
        ),
    )
    def sync_runs(context: dg.AssetExecutionContext, store: TallyStore, adapters: dg.ResourceParam[AdapterSource],
                  clock: dg.ResourceParam[Clock]) -> dg.MaterializeResult:
        from tally_pipeline.sync import SyncInProgress, run_sync

        tags = context.run.tags
        poll_time = parse_rfc3339(tags[POLL_TIME]) if POLL_TIME in tags else to_utc(clock.now())
        run_key = tags.get(RUN_KEY) or f"dagster:{context.run.run_id}"
        rt = store.runtime
        settings = rt.config.reconciliation
        rows, totals, failures = [], {"created": 0, "updated": 0, "deleted": 0, "recovered": 0, "deferred": 0}, []
        deferrals: dict[str, int] = {}
        drift = 0.0
        for cloud in context.partition_keys:
            if cloud not in rt.config.clouds and cloud not in clouds:
                raise dg.Failure(f"cloud {cloud!r} is not configured")
            try:
                run = run_sync(rt.store, rt.ingestor, cloud, adapters.adapter(cloud),
                               settle_window=settings.settle_window, mass_delete_guard=settings.mass_delete_guard,
                               now=poll_time, run_key=run_key)
            except SyncInProgress as exc:
                raise dg.Failure(str(exc)) from exc
            log = context.log.warning if run.status != "succeeded" else context.log.info
            log(f"{cloud}: {run.status}; created {run.created}, updated {run.updated}, deleted {run.deleted}, "
                f"recovered {run.recovered}, deferred {run.deferred}; drift {run.drift:.2%}"
                + (f"; {run.error}" if run.error else ""))
            for key in totals:
                totals[key] += getattr(run, key)
            for reason, n in run.deferrals_by_reason().items():
                deferrals[reason] = deferrals.get(reason, 0) + n
            drift = max(drift, run.drift or 0.0)
            if run.status == "failed":
                failures.append(f"{cloud}: {run.error}")
            for rtype, o in run.per_type.items():
                rows.append([cloud, rtype, o["status"], o["listed"], o["corrections"], o["deferred"],
                             (o["reason"] or "")[:80]])
        if failures:
            raise dg.Failure("reconciliation failed: " + "; ".join(failures),
                             metadata={"per_type": md_table(["cloud", "type", "status", "listed", "corrections",
                                                              "deferred", "reason"], rows)})
        return dg.MaterializeResult(metadata={
            **totals,
            "poll_time": format_rfc3339(poll_time),
            "run_key": run_key,
            "drift": drift,
            "deferrals_by_reason": dg.MetadataValue.json(deferrals),
            "per_type": md_table(["cloud", "type", "status", "listed", "corrections", "deferred", "reason"], rows),
        })

    # The alert checks on sync_runs are reported by their sensors every minute; running them as extra
    # steps of every 10-minute sync would only slow each run down.
    job = dg.define_asset_job("reconciliation", selection=dg.AssetSelection.assets(sync_runs).without_checks(),
                              description="Reconcile one cloud (one partition per configured cloud).")

    @dg.schedule(job=job, cron_schedule="*/10 * * * *", execution_timezone="UTC",
                 default_status=dg.DefaultScheduleStatus.RUNNING,
                 description="Every 10 minutes, one reconciliation run per configured cloud.")
    def reconciliation_schedule(context: dg.ScheduleEvaluationContext):
        return reconciliation_requests(clouds, context.scheduled_execution_time)

    @dg.sensor(job=job, minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING,
               description="Starts a follow-up sync for a cloud as soon as its deferrals' settle window has passed.")
    def settle_window_sensor(context: dg.SensorEvaluationContext, store: TallyStore):
        requests = follow_up_requests(store.runtime.store, clouds, datetime.now(UTC))
        for request in requests:
            context.log.info(f"follow-up sync for {request.partition_key}: deferrals are ready ({request.run_key})")
        return requests or dg.SkipReason("no deferral has passed its settle window")

    return {"assets": [sync_runs], "jobs": [job], "schedules": [reconciliation_schedule],
            "sensors": [settle_window_sensor]}


def reconciliation_requests(clouds: list[str], tick: datetime) -> list[dg.RunRequest]:
    """One run per cloud; the tick time is both poll time and run key, so a retried tick writes the same ids."""
    tick = to_utc(tick)
    stamp = format_rfc3339(tick)
    return [
        dg.RunRequest(run_key=f"{cloud}@{stamp}", partition_key=cloud,
                      tags={POLL_TIME: stamp, RUN_KEY: f"tick:{stamp}", CLOUD: cloud})
        for cloud in sorted(clouds)
    ]


def follow_up_requests(store, clouds: list[str], now: datetime) -> list[dg.RunRequest]:
    """Clouds whose latest run deferred something that is now due, and that no run has looked at since."""
    rows = store.query(
        "SELECT d.cloud, max(d.retry_after) FROM sync_deferrals d "
        "JOIN (SELECT cloud, max(started_at) AS started_at FROM sync_runs WHERE status <> 'running' GROUP BY cloud) l "
        "ON d.cloud = l.cloud JOIN sync_runs r ON r.cloud = l.cloud AND r.started_at = l.started_at "
        "AND r.run_id = d.run_id "
        "WHERE d.retry_after IS NOT NULL AND d.retry_after <= %s GROUP BY d.cloud",
        [now],
    )
    requests = []
    for cloud, due in rows:
        if cloud not in clouds:
            continue
        stamp = format_rfc3339(to_utc(now))
        requests.append(dg.RunRequest(
            run_key=f"{cloud}@follow-up:{format_rfc3339(to_utc(due))}", partition_key=cloud,
            tags={POLL_TIME: stamp, RUN_KEY: f"follow-up:{stamp}", CLOUD: cloud},
        ))
    return requests
