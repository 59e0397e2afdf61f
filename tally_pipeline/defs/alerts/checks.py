"""One asset check per checked alert (core/alert_defs.py), on the asset it watches (runnable by hand; the sensors report them too).
A store the check cannot read fails it, the cause as its first line."""

import dagster as dg

from tally_pipeline.core.alert_defs import CHECKED, check_of
from tally_pipeline.orchestration.alert_states import check_metadata, states
from tally_pipeline.orchestration.failures import UNREADABLE, unreadable_check
from tally_pipeline.orchestration.resources import TallyStore


def _check(key: str) -> dg.AssetChecksDefinition:
    asset, name, runbook = check_of(key).asset, key, CHECKED[key].runbook

    @dg.asset_check(asset=asset, name=name, description=f"{key.replace('_', ' ')} (runbook: {runbook})")
    def check(context: dg.AssetCheckExecutionContext, store: TallyStore) -> dg.AssetCheckResult:
        try:
            [state] = states(store, [key], instance=context.instance)
        except UNREADABLE as exc:
            failed = unreadable_check(asset, name, exc, runbook=runbook)
            return dg.AssetCheckResult(passed=False, severity=failed.severity, description=failed.description,
                                       metadata=failed.metadata)
        return dg.AssetCheckResult(passed=state.passed, severity=state.severity,
                                   description=state.message, metadata=check_metadata(state))

    return check


alert_checks = [_check(key) for key in CHECKED]
