"""One sensor per alert: evaluates it every minute and reports a changed state on its check."""

import json

import dagster as dg

from tally_pipeline.defs.alerts.states import ALERTS, evaluation, states
from tally_pipeline.orchestration.resources import TallyStore


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


alert_sensors = [_sensor(key) for key in ALERTS]
