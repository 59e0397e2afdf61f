"""One asset check per alert, on the asset it watches (runnable by hand; the sensors report them too)."""

import dagster as dg

from tally_pipeline.orchestration.alert_states import ALERTS, check_metadata, states
from tally_pipeline.orchestration.resources import TallyStore


def _check(key: str) -> dg.AssetChecksDefinition:
    asset, name, runbook = ALERTS[key]

    @dg.asset_check(asset=asset, name=name, description=f"{key.replace('_', ' ')} (runbook: {runbook})")
    def check(store: TallyStore) -> dg.AssetCheckResult:
        [state] = states(store, [key])
        return dg.AssetCheckResult(passed=state.passed, severity=state.severity,
                                   description=state.message, metadata=check_metadata(state))

    return check


alert_checks = [_check(key) for key in ALERTS]
