"""The alert sensors and checks, each with its condition true and false, over a prepared store."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import dagster as dg
import pytest

from tally_pipeline.core import alerts as rules
from tally_pipeline.definitions import build_definitions
from tally_pipeline.orchestration.resources import Ledger, TallyStore
from tally_pipeline.runtime import Runtime

pytestmark = pytest.mark.slow  # a real process or a long property search per test

NOW = datetime.now(UTC)


@pytest.fixture(autouse=True)
def _now_is_when_the_test_starts():
    """The sensors judge against the wall clock: rows dated from the module's import would age past the
    thresholds (sync_stale's 30 min) when a long, loaded run reaches a test late."""
    global NOW
    NOW = datetime.now(UTC)


def run_row(store, cloud: str, status: str, poll: datetime, drift: float = 0.0, guard: bool = False, error=None,
            created: int = 0):
    per_type = json.dumps({"volume": {"status": "enumerated", "guard_tripped": guard, "created": created}})
    store.run(lambda uow: uow.execute(
        "INSERT INTO sync_runs (run_id, cloud, run_key, poll_time, started_at, finished_at, status, per_type, error, drift) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
        (f"{cloud}-{poll.isoformat()}", cloud, "k", poll, poll, poll, status, per_type, error, drift)))


def activity_row(store, cloud: str, last: datetime):
    store.run(lambda uow: uow.execute(
        "INSERT INTO cloud_activity (cloud, first_collector_event, last_collector_event, collector_events) "
        "VALUES (%s, %s, %s, 1)", (cloud, last, last)))


def type_row(store, cloud: str, rtype: str, last: datetime):
    store.run(lambda uow: uow.execute(
        "INSERT INTO collector_type_activity (cloud, resource_type, first_collector_event, last_collector_event, "
        "collector_events) VALUES (%s, %s, %s, %s, 1)", (cloud, rtype, last, last)))


def volumes_corrected(store, volume_event_since: bool):
    """c1's third sync created volumes; the collector carries c1's instances, and its volumes or not."""
    for minutes, created in ((25, 0), (15, 0), (5, 2)):
        run_row(store, "c1", "succeeded", NOW - timedelta(minutes=minutes), created=created)
    run_row(store, "c2", "succeeded", NOW - timedelta(minutes=5))
    type_row(store, "c1", "instance", NOW - timedelta(minutes=1))
    type_row(store, "c1", "volume", NOW - timedelta(minutes=1 if volume_event_since else 60))


@pytest.fixture
def env(store_url, tmp_path):
    config = tmp_path / "tally.yaml"
    config.write_text(f"database: {store_url}\nclouds:\n  c1: {{provider: simulated}}\n  c2: {{provider: simulated}}\n")
    rt = Runtime.load(str(config))
    rt.store.migrate()
    store = TallyStore(config_path=str(config))
    defs = build_definitions(["c1", "c2"], {"store": store, "ledger": Ledger(config_path=str(config)), "adapters": object(),
                                            "clock": object()})
    yield rt, defs
    rt.close()


def sensor_result(defs, name: str, cursor: str | None = None):
    sensor = defs.resolve_sensor_def(name)
    with dg.build_sensor_context(instance=dg.DagsterInstance.ephemeral(), cursor=cursor,
                                 repository_def=defs.get_repository_def(),
                                 resources={"store": defs.resources["store"]}) as context:
        result = sensor.evaluate_tick(context)
        return result, context.cursor


def check_outcome(defs, name: str) -> bool:
    checks = [c for c in defs.asset_checks if name in {k.name for k in c.check_keys}]
    job = dg.define_asset_job("only_check", selection=dg.AssetSelection.checks(*checks))
    scoped = dg.Definitions(assets=[dg.AssetSpec(k.asset_key) for c in checks for k in c.check_keys],
                            asset_checks=checks, jobs=[job], resources={"store": defs.resources["store"]})
    result = scoped.resolve_job_def("only_check").execute_in_process()
    [evaluation] = [e.event_specific_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
    return evaluation.passed


def reported(result) -> tuple[str, bool] | None:
    events = [e for e in (result.asset_events or []) if isinstance(e, dg.AssetCheckEvaluation)]
    if events and not events[0].passed:
        assert events[0].severity == dg.AssetCheckSeverity.ERROR  # a firing alert is red, not a warning
    return (events[0].check_name, events[0].passed) if events else None


def ledger_cycle_row(store, skipped: bool):
    from tally_pipeline.store import ledger_records

    skips = [ledger_records.SkipRow("c1", "p1", "vcpu_hours", "bad_size", "bad_size: instance/vm-1: vcpus", 1)]
    cycle = ledger_records.CycleRow("cycle-1", NOW, NOW, 3, 3, 0, int(skipped))
    store.run(lambda uow: ledger_records.record_cycle(uow, cycle, skips if skipped else []))


CASES = {
    "ledger_entities_skipped": (
        lambda s: ledger_cycle_row(s, skipped=False),
        lambda s: ledger_cycle_row(s, skipped=True),
    ),
    "events_silent": (
        lambda s: activity_row(s, "c1", NOW - timedelta(minutes=5)),
        lambda s: activity_row(s, "c1", NOW - timedelta(hours=3)),
    ),
    "sync_stale": (
        lambda s: (run_row(s, "c1", "succeeded", NOW - timedelta(minutes=5)), run_row(s, "c2", "partial", NOW - timedelta(minutes=9))),
        lambda s: (run_row(s, "c1", "succeeded", NOW - timedelta(minutes=5)), run_row(s, "c2", "succeeded", NOW - timedelta(hours=2))),
    ),
    "sync_errors": (
        lambda s: (run_row(s, "c1", "succeeded", NOW - timedelta(minutes=5)), run_row(s, "c2", "succeeded", NOW)),
        lambda s: run_row(s, "c1", "failed", NOW - timedelta(minutes=5), error="volume: HTTP 500"),
    ),
    "service_events_silent": (
        lambda s: volumes_corrected(s, volume_event_since=True),
        lambda s: volumes_corrected(s, volume_event_since=False),
    ),
    "drift_high": (
        lambda s: (run_row(s, "c1", "succeeded", NOW - timedelta(minutes=5), drift=0.01), run_row(s, "c2", "succeeded", NOW)),
        # past its warm-up: the cloud's third sync
        lambda s: [run_row(s, "c1", "succeeded", NOW - timedelta(minutes=m), drift=0.3) for m in (25, 15, 5)],
    ),
}


@pytest.mark.parametrize("alert", sorted(CASES))
@pytest.mark.parametrize("firing", [False, True])
def test_sensor_and_check(env, alert, firing) -> None:
    rt, defs = env
    CASES[alert][int(firing)](rt.store)
    result, cursor = sensor_result(defs, f"{alert}_sensor")
    assert reported(result) == (alert, not firing)
    # the same state again is reported again (a check never goes stale), the cursor (what was logged) unchanged
    again, again_cursor = sensor_result(defs, f"{alert}_sensor", cursor=cursor)
    assert reported(again) == (alert, not firing) and again_cursor == cursor
    assert check_outcome(defs, alert) is (not firing)


def test_events_silent_ignores_clouds_quiet_for_over_a_day() -> None:
    s = rules.AlertSettings()
    dormant = rules.events_silent([rules.CloudActivity("c1", NOW - timedelta(days=3))], NOW, s)
    assert not dormant.firing
    fired = rules.events_silent([rules.CloudActivity("c1", NOW - timedelta(hours=2)), rules.CloudActivity("c2", NOW)], NOW, s)
    assert fired.firing and fired.clouds == ("c1",) and "c1" in fired.message


def test_drift_high_fires_on_a_tripped_guard_even_with_low_drift() -> None:
    run = rules.LastRun("c1", "succeeded", NOW, 0.0, None, guard_tripped=True)
    condition = rules.drift_high([run], rules.AlertSettings())
    assert condition.firing and "mass-delete guard" in condition.message


@pytest.mark.parametrize("alert", ["sync_errors", "drift_high", "service_events_silent"])
def test_a_cloud_that_never_synced_is_unknown_not_green(env, alert) -> None:
    rt, defs = env
    run_row(rt.store, "c1", "succeeded", NOW - timedelta(minutes=5))  # c2 never synced
    result, _ = sensor_result(defs, f"{alert}_sensor")
    [evaluation] = [e for e in result.asset_events if isinstance(e, dg.AssetCheckEvaluation)]
    assert not evaluation.passed and evaluation.severity == dg.AssetCheckSeverity.WARN
    assert evaluation.metadata["never_synced"].value == "c2" and evaluation.metadata["state"].value == "UNKNOWN"
    assert check_outcome(defs, alert) is False
    run_row(rt.store, "c2", "succeeded", NOW - timedelta(minutes=1))
    assert check_outcome(defs, alert) is True


def test_drift_high_does_not_judge_a_clouds_first_syncs(env) -> None:
    rt, defs = env
    run_row(rt.store, "c2", "succeeded", NOW - timedelta(minutes=9))
    for n, minutes in enumerate((25, 15, 5), start=1):
        run_row(rt.store, "c1", "succeeded", NOW - timedelta(minutes=minutes), drift=0.25)
        result, _ = sensor_result(defs, "drift_high_sensor")
        [evaluation] = [e for e in result.asset_events if isinstance(e, dg.AssetCheckEvaluation)]
        # the first two syncs correct what the events missed before tally listened: warming up, not firing
        assert evaluation.passed is (n <= 2)
        assert ("warming up (first syncs not judged on drift): c1 25.0%" in evaluation.description) is (n <= 2)


def test_service_events_silent_names_the_cloud_type_and_service(env) -> None:
    rt, defs = env
    volumes_corrected(rt.store, volume_event_since=False)
    result, _ = sensor_result(defs, "service_events_silent_sensor")
    [evaluation] = [e for e in result.asset_events if isinstance(e, dg.AssetCheckEvaluation)]
    assert evaluation.asset_key == dg.AssetKey("sync_runs") and evaluation.metadata["clouds"].value == "c1"
    assert "c1 volume: the latest sync corrected 2, but no volume event from cinder reached the collector since" \
        in evaluation.description
    assert evaluation.metadata["runbook"].value == "docs/runbooks/TallyServiceEventsSilent.md"
    assert evaluation.metadata["details"].value["c1"]["volume"]["service"] == "cinder"
