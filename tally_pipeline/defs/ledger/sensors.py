"""Re-evaluates the ledger checks when their latest execution says nothing true.

A posting run that fails (the database went away mid-cycle) leaves ``ledger_balanced`` and
``postings_match_usage`` "Execution failed" until the next hourly cycle. This sensor looks every
minute: a check whose latest execution did not finish (its run failed or skipped it), or that was
last reported unreadable, is evaluated again from the ledger as it is now. While the ledger cannot
be read the check is reported failed, the cause as its first line; the first tick that can read it
says the truth. So "Execution failed" lasts no longer than the outage plus one tick.
"""

from __future__ import annotations

from typing import Any

import dagster as dg

from tally_pipeline.defs.ledger.assets import ledger_balanced, postings_match_usage
from tally_pipeline.orchestration.failures import UNREADABLE, cause, outage_fingerprint, unreadable_check
from tally_pipeline.orchestration.resources import Ledger

# check -> (the asset it sits on, its verdict over a verification)
LEDGER_CHECKS: dict[str, tuple[str, Any]] = {
    "ledger_balanced": ("ledger_audit", ledger_balanced),
    "postings_match_usage": ("ledger_postings", postings_match_usage),
}


def needs_evaluation(instance: dg.DagsterInstance, asset: str, name: str) -> str | None:
    """Why the check's latest execution is no verdict (None: it is one, or the check never ran)."""
    record = instance.get_latest_asset_check_evaluation_record(dg.AssetCheckKey(dg.AssetKey(asset), name))
    if record is None:
        return None  # never ran: the first posting cycle evaluates it
    if record.status.value == "PLANNED":
        run = instance.get_run_by_id(record.run_id) if record.run_id else None
        if run is None or run.is_finished:
            return f"its run {record.run_id[:8]} ended without evaluating it"
        return None  # still running: the run says
    evaluation = record.event.dagster_event.event_specific_data if record.event and record.event.dagster_event else None
    state = evaluation.metadata.get("state") if isinstance(evaluation, dg.AssetCheckEvaluation) else None
    if state is not None and getattr(state, "value", state) == "unreadable":
        return "it was last reported unreadable"
    return None


@dg.sensor(minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.RUNNING,
           description="Every minute, re-evaluates ledger_balanced and postings_match_usage when their latest "
                       "execution is no verdict (a failed or skipped run, an unreadable ledger).")
def ledger_checks_sensor(context: dg.SensorEvaluationContext, ledger: Ledger) -> dg.SensorResult:
    due = {name: why for name, (asset, _) in LEDGER_CHECKS.items()
           if (why := needs_evaluation(context.instance, asset, name)) is not None}
    if not due:
        context.update_cursor("")
        return dg.SensorResult(skip_reason=f"evaluated 0 checks: the latest executions of {', '.join(LEDGER_CHECKS)} "
                                           "are verdicts")
    try:
        verification = ledger.verify()
    except UNREADABLE as exc:
        if outage_fingerprint(exc) != context.cursor:  # once per outage
            context.log.error(f"{cause(exc)}\n{', '.join(due)} cannot be evaluated: reported failed until the "
                              "ledger answers")
            context.update_cursor(outage_fingerprint(exc))
        return dg.SensorResult(
            asset_events=[unreadable_check(LEDGER_CHECKS[name][0], name, exc) for name in due],
            skip_reason=f"evaluated 0 of {len(due)} checks, reported failed: {cause(exc)}")
    events, failing = [], []
    for name, why in due.items():
        asset, verdict = LEDGER_CHECKS[name]
        outcome = verdict(verification)
        events.append(dg.AssetCheckEvaluation(
            asset_key=dg.AssetKey(asset), check_name=name,
            metadata={**outcome.pop("metadata"), "evaluated_by": f"ledger_checks_sensor: {why}"}, **outcome))
        if not outcome["passed"]:
            failing.append(name)
    if context.cursor:
        context.log.info(f"{', '.join(due)} evaluated again: the ledger answers")
    context.update_cursor("")
    return dg.SensorResult(asset_events=events, skip_reason=(
        f"evaluated {len(events)} checks ({', '.join(due)}), failing {len(failing)}"
        + (f": {', '.join(failing)}" if failing else "")))
