"""One sensor per checked alert (core/alert_defs.py): evaluates it every minute and reports its check's state on every tick.

Reporting on every tick (not only on a change) is what keeps a check from going stale: a run that
failed with the check in its selection leaves it "Execution failed", a config edit changes a
threshold, a cloud is set aside as misconfigured — the next tick says the true state whatever
happened in between. A store the tick cannot read is reported too: the check fails with the cause as
its first line (never keeps its last pass). The terminal hears only changes: the cursor holds the
last state logged. Each tick says what it did ("evaluated 1 check, fired 0: …").
"""

import json

import dagster as dg

from tally_pipeline.core.alert_defs import CHECKED, check_of
from tally_pipeline.orchestration.alert_states import evaluation, states
from tally_pipeline.orchestration.failures import UNREADABLE, cause, outage_fingerprint, unreadable_check
from tally_pipeline.orchestration.resources import TallyStore


def _sensor(key: str) -> dg.SensorDefinition:
    asset, name, runbook = check_of(key).asset, key, CHECKED[key].runbook

    @dg.sensor(name=f"{key}_sensor", minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.RUNNING,
               description=f"Evaluates the {key.replace('_', ' ')} alert every minute and reports it on {asset}'s "
                           f"{name} check (every tick; a change of state is also logged).")
    def sensor(context: dg.SensorEvaluationContext, store: TallyStore) -> dg.SensorResult:
        try:
            [state] = states(store, [key], instance=context.instance)
        except UNREADABLE as exc:
            if outage_fingerprint(exc) != context.cursor:  # once per outage (and per change of its kind)
                context.log.error(f"{cause(exc)}\n{name} cannot be evaluated: reported failed until the store "
                                  f"answers (runbook: {runbook})")
                context.update_cursor(outage_fingerprint(exc))
            return dg.SensorResult(asset_events=[unreadable_check(asset, name, exc, runbook=runbook)],
                                   skip_reason=f"{name} not evaluated, reported failed: {cause(exc)}")
        fingerprint = json.dumps(state.fingerprint())
        if fingerprint != context.cursor:
            # Only a firing alert is logged as a warning; "unknown" (a cloud never synced) is information.
            (context.log.warning if state.condition.firing else context.log.info)(
                f"{state.condition.alert}: now {state.label}: {state.message}"
                + (f" (runbook: {runbook})" if state.condition.firing else "")
            )
            context.update_cursor(fingerprint)
        fired = int(state.condition.firing)
        return dg.SensorResult(asset_events=[evaluation(state)],
                               skip_reason=f"evaluated 1 check ({name}), fired {fired}: {state.label}: {state.message}")

    return sensor


alert_sensors = [_sensor(key) for key in CHECKED]
