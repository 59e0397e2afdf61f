"""The alerts' check states, over the definitions in core/alert_defs.py (defs/alerts/checks.py and sensors.py report them).

The state of a check is reported wherever it can change, so the asset page always shows the current
one: each alert sensor reports it on every tick (logging only changes); every sync run reports the
sync checks on ``sync_runs`` and every ``event_log`` materialization reports ``events_silent`` (a new
materialization would otherwise leave the check "not evaluated"); the checks can also be run by hand.
A firing alert is an ERROR-severity failure (red). A configured cloud that never synced is unknown
for ``sync_errors``, ``drift_high`` and ``service_events_silent``: a WARN failure, never green.
"""


from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import dagster as dg

from tally_pipeline.core.alert_defs import CHECKED, check_of
from tally_pipeline.core.alerts import Condition, UnrecordedFailure
from tally_pipeline.core.timeutil import parse_rfc3339
from tally_pipeline.orchestration.resources import StoreReads
from tally_pipeline.orchestration.tags import CLOUD, POLL_TIME, SYNC_STATUS

# Of the checked alerts (core/alert_defs.py): the sync ones (reported by every sync run) and those that say
# nothing about a cloud without a sync run (such a cloud is unknown, not fine).
SYNC_CHECKS = tuple(k for k in CHECKED if check_of(k).asset == "sync_runs")
NEEDS_A_SYNC = tuple(k for k in CHECKED if check_of(k).unknown_until_synced)


@dataclass(frozen=True)
class CheckState:
    """One check's state: the alert's condition, plus the configured clouds it cannot judge yet."""

    key: str
    condition: Condition
    unknown: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return not self.condition.firing and not self.unknown

    @property
    def severity(self) -> dg.AssetCheckSeverity:
        # Firing is red; only "unknown" (a cloud never synced) is the yellow warning.
        return dg.AssetCheckSeverity.ERROR if self.condition.firing else dg.AssetCheckSeverity.WARN

    @property
    def message(self) -> str:
        if not self.unknown:
            return self.condition.message
        unknown = f"unknown: never synced: {', '.join(self.unknown)}"
        return f"{self.condition.message}; {unknown}" if self.condition.firing else unknown

    @property
    def label(self) -> str:
        return "FIRING" if self.condition.firing else ("UNKNOWN" if self.unknown else "ok")

    def fingerprint(self) -> list[object]:
        return [self.condition.firing, list(self.condition.clouds), list(self.unknown)]


def states(db: StoreReads, keys: Sequence[str], now: datetime | None = None,
           instance: dg.DagsterInstance | None = None) -> list[CheckState]:
    """The checks' states; with the Dagster ``instance``, sync_errors also counts the sync runs that failed
    without recording their sync (``unrecorded_sync_failures``)."""
    clouds = sorted(db.config.clouds)
    unrecorded = unrecorded_sync_failures(instance) if instance is not None and "sync_errors" in keys else []
    conditions = db.alert_conditions(now or datetime.now(UTC), unrecorded)
    synced = db.clouds_ever_synced() if any(k in NEEDS_A_SYNC for k in keys) else set()
    return [CheckState(k, conditions[k], tuple(c for c in clouds if c not in synced) if k in NEEDS_A_SYNC else ())
            for k in keys]


def unrecorded_sync_failures(instance: dg.DagsterInstance, limit: int = 100) -> list[UnrecordedFailure]:
    """The latest reconciliation runs that failed with their sync, from Dagster's own run records.

    A sync that fails because the store cannot be written cannot record itself, so once the store
    answers again its latest recorded sync may be an older success: these runs are how sync_errors
    still knows (core.alerts.sync_errors keeps those later than the cloud's latest recorded sync).
    """
    records = instance.get_run_records(
        filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE], tags={SYNC_STATUS: "failed"}), limit=limit)
    failures = []
    for record in records:
        run = record.dagster_run
        cloud = run.tags.get(CLOUD)
        if cloud is None:
            continue
        tick = run.tags.get(POLL_TIME)
        when = parse_rfc3339(tick) if tick else datetime.fromtimestamp(record.start_time or record.create_timestamp.timestamp(), UTC)
        failures.append(UnrecordedFailure(cloud, when, f"run {run.run_id[:8]} failed and could not record its sync"))
    return failures


def check_metadata(state: CheckState) -> dict[str, Any]:
    condition = state.condition
    return {"alert": condition.alert, "state": state.label, "clouds": ", ".join(condition.clouds) or "none",
            "never_synced": ", ".join(state.unknown) or "none", "message": state.message,
            "details": dg.MetadataValue.json(dict(condition.details)), "runbook": CHECKED[state.key].runbook}


def evaluation(state: CheckState) -> dg.AssetCheckEvaluation:
    return dg.AssetCheckEvaluation(asset_key=dg.AssetKey(check_of(state.key).asset), check_name=state.key,
                                   passed=state.passed, severity=state.severity, description=state.message,
                                   metadata=check_metadata(state))


def report(context: dg.AssetExecutionContext, db: StoreReads, keys: Sequence[str]) -> None:
    """Record the checks' current state in this run (call it after the asset's materialization), except
    those the run evaluates as steps of their own (the UI's Materialize selects an asset's checks too):
    each check is evaluated once per run."""
    # the checks this run executes as steps: those of its job (a subset job, for the UI's selection)
    # that the run selected (None: all of them)
    in_job = {k for data in context.job_def.asset_layer.data for k in data.assets_def.check_keys}
    chosen = context.run.asset_check_selection
    selected = {(k.asset_key.to_user_string(), k.name) for k in (in_job if chosen is None else in_job & set(chosen))}
    keys = [k for k in keys if (check_of(k).asset, k) not in selected]
    for state in states(db, keys, instance=context.instance) if keys else []:
        context.log_event(evaluation(state))

