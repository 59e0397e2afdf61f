"""The five alerts as Dagster sensors and asset checks, over the conditions in core/alerts.py.

Each sensor evaluates its condition, logs it, and reports the result as an asset check evaluation
whenever it changes, so the UI shows it on the asset; the checks can also be run by hand.
"""


import json
from datetime import UTC, datetime

import dagster as dg

from tally_pipeline import alerts
from tally_pipeline.core.alerts import Condition
from tally_pipeline.defs.resources import TallyStore

# alert key -> (asset the check sits on, check name, runbook)
ALERTS = {
    "events_silent": ("event_log", "events_silent", "docs/runbooks/TallyCloudEventsSilent.md"),
    "sync_stale": ("sync_runs", "sync_stale", "docs/runbooks/TallySyncStale.md"),
    "sync_errors": ("sync_runs", "sync_errors", "docs/runbooks/TallySyncErrors.md"),
    "drift_high": ("sync_runs", "drift_high", "docs/runbooks/TallyReconciliationDriftHigh.md"),
    "ledger_entities_skipped": ("ledger_postings", "ledger_entities_skipped", "docs/runbooks/TallyLedgerEntitiesSkipped.md"),
}


def evaluate(store: TallyStore, key: str, now: datetime | None = None) -> Condition:
    rt = store.runtime
    conditions = alerts.evaluate(rt.store, sorted(rt.config.clouds), now or datetime.now(UTC), rt.config.alerts.rules())
    return conditions[key]


def _metadata(condition: Condition, runbook: str) -> dict:
    return {"alert": condition.alert, "clouds": ", ".join(condition.clouds) or "none", "message": condition.message,
            "details": dg.MetadataValue.json(dict(condition.details)), "runbook": runbook}


def _check(key: str) -> dg.AssetChecksDefinition:
    asset, name, runbook = ALERTS[key]

    @dg.asset_check(asset=asset, name=name, description=f"{key.replace('_', ' ')} (runbook: {runbook})")
    def check(store: TallyStore) -> dg.AssetCheckResult:
        condition = evaluate(store, key)
        return dg.AssetCheckResult(passed=not condition.firing, severity=dg.AssetCheckSeverity.WARN,
                                   description=condition.message, metadata=_metadata(condition, runbook))

    return check


def _sensor(key: str) -> dg.SensorDefinition:
    asset, name, runbook = ALERTS[key]

    @dg.sensor(name=f"{key}_sensor", minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.RUNNING,
               description=f"Evaluates the {key.replace('_', ' ')} alert and reports it on {asset}'s {name} check.")
    def sensor(context: dg.SensorEvaluationContext, store: TallyStore) -> dg.SensorResult:
        condition = evaluate(store, key)
        (context.log.warning if condition.firing else context.log.info)(
            f"{condition.alert}: {'FIRING' if condition.firing else 'ok'}: {condition.message}"
            + (f" (runbook: {runbook})" if condition.firing else "")
        )
        state = json.dumps([condition.firing, list(condition.clouds)])
        if state == context.cursor:
            return dg.SensorResult(skip_reason=f"unchanged: {condition.message}")
        context.update_cursor(state)
        return dg.SensorResult(asset_events=[dg.AssetCheckEvaluation(
            asset_key=dg.AssetKey(asset), check_name=name, passed=not condition.firing,
            severity=dg.AssetCheckSeverity.WARN, metadata=_metadata(condition, runbook),
        )])

    return sensor


alert_checks = [_check(key) for key in ALERTS]
alert_sensors = [_sensor(key) for key in ALERTS]
