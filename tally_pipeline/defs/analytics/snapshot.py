"""Whether the analyst snapshot is current: a check on event_log, reported every minute by its sensor
(orchestration/snapshot.py says what "current" means)."""

import json

import dagster as dg

from tally_pipeline.orchestration.failures import UNREADABLE, cause, outage_fingerprint, unreadable_check
from tally_pipeline.orchestration.resources import TallyStore
from tally_pipeline.orchestration.snapshot import CHECK, snapshot_evaluation

ASSET, NAME = CHECK


@dg.asset_check(asset=ASSET, name=NAME,
                description="The analyst snapshot (Parquet, embedded DuckDB) holds every materialization of the tables "
                            "it mirrors: red while one of them was written after it (docs/data-dictionary.md).")
def analyst_snapshot_current(context: dg.AssetCheckExecutionContext, store: TallyStore) -> dg.AssetCheckResult:
    try:
        return dg.AssetCheckResult(**snapshot_evaluation(context.instance, store))
    except UNREADABLE as exc:
        failed = unreadable_check(ASSET, NAME, exc)
        return dg.AssetCheckResult(passed=False, severity=failed.severity, description=failed.description,
                                   metadata=failed.metadata)


@dg.sensor(minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.RUNNING,
           description="Every minute, reports whether the analyst snapshot holds every materialization of the tables "
                       "it mirrors (the analyst_snapshot_current check on event_log).")
def analyst_snapshot_sensor(context: dg.SensorEvaluationContext, store: TallyStore) -> dg.SensorResult:
    try:
        verdict = snapshot_evaluation(context.instance, store)
    except UNREADABLE as exc:
        if outage_fingerprint(exc) != context.cursor:
            context.log.error(f"{cause(exc)}\n{NAME} cannot be evaluated: reported failed until the store answers")
            context.update_cursor(outage_fingerprint(exc))
        return dg.SensorResult(asset_events=[unreadable_check(ASSET, NAME, exc)],
                               skip_reason=f"{NAME} not evaluated, reported failed: {cause(exc)}")
    state = verdict["metadata"]["state"]
    if json.dumps(state) != context.cursor:  # the terminal hears a change, not every tick
        (context.log.warning if not verdict["passed"] else context.log.info)(f"{NAME}: now {state}: "
                                                                              f"{verdict['description']}")
        context.update_cursor(json.dumps(state))
    return dg.SensorResult(
        asset_events=[dg.AssetCheckEvaluation(asset_key=dg.AssetKey(ASSET), check_name=NAME, **verdict)],
        skip_reason=f"evaluated 1 check ({NAME}), failing {int(not verdict['passed'])}: {verdict['description']}")
