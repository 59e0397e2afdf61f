"""The alerts as Dagster asset checks and sensors, over the conditions in core/alerts.py.

The state of a check is reported wherever it can change, so the asset page always shows the current
one: each alert sensor reports it on every tick that changes it; every sync run reports the three
sync checks on ``sync_runs`` and every ``event_log`` materialization reports ``events_silent`` (a new
materialization would otherwise leave the check "not evaluated"); the checks can also be run by hand.
A firing alert is an ERROR-severity failure (red). A configured cloud that never synced is unknown
for ``sync_errors`` and ``drift_high``: a WARN failure, never green.
"""


import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import dagster as dg

from tally_pipeline import alerts
from tally_pipeline.core.alerts import Condition
from tally_pipeline.defs.resources import TallyStore
from tally_pipeline.store import asset_reads

# alert key -> (asset the check sits on, check name, runbook)
ALERTS = {
    "events_silent": ("event_log", "events_silent", "docs/runbooks/TallyCloudEventsSilent.md"),
    "sync_stale": ("sync_runs", "sync_stale", "docs/runbooks/TallySyncStale.md"),
    "sync_errors": ("sync_runs", "sync_errors", "docs/runbooks/TallySyncErrors.md"),
    "drift_high": ("sync_runs", "drift_high", "docs/runbooks/TallyReconciliationDriftHigh.md"),
    "ledger_entities_skipped": ("ledger_postings", "ledger_entities_skipped", "docs/runbooks/TallyLedgerEntitiesSkipped.md"),
}
SYNC_CHECKS = ("sync_stale", "sync_errors", "drift_high")
# Alerts that say nothing about a cloud without a sync run: such a cloud is unknown, not fine.
NEEDS_A_SYNC = ("sync_errors", "drift_high")


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

    def fingerprint(self) -> list:
        return [self.condition.firing, list(self.condition.clouds), list(self.unknown)]


def states(store: TallyStore, keys: Sequence[str], now: datetime | None = None) -> list[CheckState]:
    rt = store.runtime
    clouds = sorted(rt.config.clouds)
    conditions = alerts.evaluate(rt.store, clouds, now or datetime.now(UTC), rt.config.alerts.rules())
    synced = asset_reads.clouds_ever_synced(rt.store) if any(k in NEEDS_A_SYNC for k in keys) else set()
    return [CheckState(k, conditions[k], tuple(c for c in clouds if c not in synced) if k in NEEDS_A_SYNC else ())
            for k in keys]


def _metadata(state: CheckState) -> dict:
    condition = state.condition
    return {"alert": condition.alert, "state": state.label, "clouds": ", ".join(condition.clouds) or "none",
            "never_synced": ", ".join(state.unknown) or "none", "message": state.message,
            "details": dg.MetadataValue.json(dict(condition.details)), "runbook": ALERTS[state.key][2]}


def evaluation(state: CheckState) -> dg.AssetCheckEvaluation:
    asset, name, _ = ALERTS[state.key]
    return dg.AssetCheckEvaluation(asset_key=dg.AssetKey(asset), check_name=name, passed=state.passed,
                                   severity=state.severity, description=state.message, metadata=_metadata(state))


def report(context: dg.AssetExecutionContext, store: TallyStore, keys: Sequence[str]) -> None:
    """Record the checks' current state in this run (call it after the asset's materialization)."""
    for state in states(store, keys):
        context.log_event(evaluation(state))


def _check(key: str) -> dg.AssetChecksDefinition:
    asset, name, runbook = ALERTS[key]

    @dg.asset_check(asset=asset, name=name, description=f"{key.replace('_', ' ')} (runbook: {runbook})")
    def check(store: TallyStore) -> dg.AssetCheckResult:
        [state] = states(store, [key])
        return dg.AssetCheckResult(passed=state.passed, severity=state.severity,
                                   description=state.message, metadata=_metadata(state))

    return check


def _sensor(key: str) -> dg.SensorDefinition:
    asset, name, runbook = ALERTS[key]

    @dg.sensor(name=f"{key}_sensor", minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.RUNNING,
               description=f"Evaluates the {key.replace('_', ' ')} alert and reports it on {asset}'s {name} check.")
    def sensor(context: dg.SensorEvaluationContext, store: TallyStore) -> dg.SensorResult:
        [state] = states(store, [key])
        # Only a firing alert is logged as a warning; "unknown" (a cloud never synced) is information.
        (context.log.warning if state.condition.firing else context.log.info)(
            f"{state.condition.alert}: {state.label}: {state.message}"
            + (f" (runbook: {runbook})" if state.condition.firing else "")
        )
        fingerprint = json.dumps(state.fingerprint())
        if fingerprint == context.cursor:
            return dg.SensorResult(skip_reason=f"unchanged: {state.message}")
        context.update_cursor(fingerprint)
        return dg.SensorResult(asset_events=[evaluation(state)])

    return sensor


alert_checks = [_check(key) for key in ALERTS]
alert_sensors = [_sensor(key) for key in ALERTS]
