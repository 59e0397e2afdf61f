"""The code location through an outage of its Postgres store (issue #37): no check stays green while
nothing is watched, ledger checks are true again one tick after the store is, the log says each change
of the outage once. The outage is real: the test database stops accepting connections."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import dagster as dg
import psycopg
import pytest

from tally_pipeline.definitions import build_definitions
from tally_pipeline.orchestration.resources import Ledger, TallyStore, WallClock
from tally_pipeline.store import open_store
from tally_pipeline_tests.defs.test_dagster_alerts import run_row

pytestmark = pytest.mark.slow  # each read in the outage waits out the pool's 10 s

REFUSED = 'is not currently accepting connections'


@contextmanager
def outage(admin: str, url: str) -> Iterator[None]:
    """The store's database refuses every new connection and drops the open ones inside the block, but
    the test's own: a database nobody is connected to looks abandoned to the clean-up of killed runs."""
    name = psycopg.conninfo.conninfo_to_dict(url)["dbname"]
    with psycopg.connect(url, autocommit=True) as held, psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> %s",
                     (name, held.info.backend_pid))
        try:
            yield
        finally:
            conn.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')


@pytest.fixture
def location(pg_url, tmp_path):
    config = tmp_path / "tally.yaml"
    config.write_text(f"database: {pg_url}\nclouds:\n  c1: {{provider: simulated}}\n")
    store = open_store(pg_url, migrate=True)
    run_row(store, "c1", "succeeded", datetime.now(UTC) - timedelta(minutes=5))  # synced: every sync check passes
    store.close()
    resources = {"store": TallyStore(config_path=str(config)), "ledger": Ledger(config_path=str(config)),
                 "adapters": object(), "clock": WallClock()}
    return build_definitions(["c1"], resources)


def tick(defs: dg.Definitions, name: str, instance: dg.DagsterInstance, cursor: str | None = None):
    """One tick of a sensor, its asset events recorded as the daemon records them."""
    with dg.build_sensor_context(instance=instance, cursor=cursor, repository_def=defs.get_repository_def(),
                                 resources=dict(defs.resources)) as context:
        result = defs.resolve_sensor_def(name).evaluate_tick(context)
        cursor = context.cursor
    for event in result.asset_events:
        instance.report_runless_asset_event(event)
    return result, cursor


def latest(instance: dg.DagsterInstance, asset: str, check: str):
    return instance.get_latest_asset_check_evaluation_record(dg.AssetCheckKey(dg.AssetKey(asset), check))


def test_alert_checks_go_red_with_the_cause_first_and_the_outage_is_logged_once(
        location, pg_url, postgres_server, capfd, caplog) -> None:
    instance = dg.DagsterInstance.ephemeral()
    result, cursor = tick(location, "sync_stale_sensor", instance)
    assert latest(instance, "sync_runs", "sync_stale").status.value == "SUCCEEDED"
    assert result.skip_message.startswith("evaluated 1 check (sync_stale), fired 0: ok")  # says what it did
    caplog.set_level(logging.INFO)
    capfd.readouterr()
    with outage(postgres_server, pg_url):
        for _ in range(2):
            result, cursor = tick(location, "sync_stale_sensor", instance, cursor)
            [evaluation] = result.asset_events
            # failed, red, the cause on the first line: never the last pass
            assert not evaluation.passed and evaluation.severity == dg.AssetCheckSeverity.ERROR
            first = evaluation.description.splitlines()[0]
            assert first.startswith("StoreUnavailable: PostgreSQL unavailable") and REFUSED in first
            assert result.skip_message.startswith("sync_stale not evaluated, reported failed: StoreUnavailable")
            assert latest(instance, "sync_runs", "sync_stale").status.value == "FAILED"
        # the check run by hand says the same, not "Execution failed"
        checks = [c for c in location.asset_checks if "sync_errors" in {k.name for k in c.check_keys}]
        job = dg.define_asset_job("only_check", selection=dg.AssetSelection.checks(*checks))
        scoped = dg.Definitions(assets=[dg.AssetSpec("sync_runs")], asset_checks=checks, jobs=[job],
                                resources={"store": location.resources["store"]})
        run = scoped.resolve_job_def("only_check").execute_in_process(instance=instance)
        [by_hand] = [e.event_specific_data for e in run.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
        assert not by_hand.passed and by_hand.description.startswith("StoreUnavailable: PostgreSQL unavailable")
        # a sensor that starts runs or records writes skips its tick, the cause first
        skipped, _ = tick(location, "api_writes_sensor", instance)
        assert skipped.skip_message.startswith("StoreUnavailable: PostgreSQL unavailable")
    terminal = capfd.readouterr().err
    # the sensor logged the outage once over its two ticks, the cause first
    said = [line for line in terminal.splitlines() if "StoreUnavailable" in line and " - ERROR - " in line]
    assert len(said) == 2, terminal  # one per sensor: sync_stale's (over two ticks) and api_writes'
    assert terminal.count("sync_stale cannot be evaluated") == 1
    # the pool's per-attempt lines are gone; the outage's start is one line, however many pools tried
    assert not [r for r in caplog.records if r.getMessage().startswith("error connecting in 'tally'")]
    started = [r for r in caplog.records if "unreachable" in r.getMessage() and REFUSED in r.getMessage()]
    assert len(started) == 1
    # the store answers: the next tick is the truth again, and the end of the outage is one line
    result, cursor = tick(location, "sync_stale_sensor", instance, cursor)
    assert result.asset_events[0].passed and latest(instance, "sync_runs", "sync_stale").status.value == "SUCCEEDED"
    assert len([r for r in caplog.records if "answers again" in r.getMessage()]) == 1


def test_ledger_checks_are_true_one_tick_after_the_outage(location, pg_url, postgres_server) -> None:
    instance = dg.DagsterInstance.ephemeral()
    posting = location.resolve_job_def("delta_posting")
    assert posting.execute_in_process(instance=instance).success
    assert latest(instance, "ledger_audit", "ledger_balanced").status.value == "SUCCEEDED"
    quiet, cursor = tick(location, "ledger_checks_sensor", instance)
    assert not quiet.asset_events and quiet.skip_message.startswith("evaluated 0 checks")
    with outage(postgres_server, pg_url):
        failed = posting.execute_in_process(instance=instance, raise_on_error=False)
        assert not failed.success
        # what the UI shows as "Execution failed": planned in a run that failed
        for asset, check in (("ledger_audit", "ledger_balanced"), ("ledger_postings", "postings_match_usage")):
            record = latest(instance, asset, check)
            assert record.status.value == "PLANNED" and record.run_id == failed.run_id
        result, cursor = tick(location, "ledger_checks_sensor", instance, cursor)
        assert {e.check_name: e.passed for e in result.asset_events} == {
            "ledger_balanced": False, "postings_match_usage": False}
        assert all(e.description.startswith("StoreUnavailable: PostgreSQL unavailable") for e in result.asset_events)
    # the first tick that can read the ledger says the truth
    result, cursor = tick(location, "ledger_checks_sensor", instance, cursor)
    assert {e.check_name: e.passed for e in result.asset_events} == {
        "ledger_balanced": True, "postings_match_usage": True}
    assert result.skip_message == "evaluated 2 checks (ledger_balanced, postings_match_usage), failing 0"
    assert latest(instance, "ledger_audit", "ledger_balanced").status.value == "SUCCEEDED"
    # and then it rests: the latest executions are verdicts
    again, _ = tick(location, "ledger_checks_sensor", instance, cursor)
    assert not again.asset_events


def test_a_sync_that_failed_in_the_outage_keeps_sync_errors_red_until_a_later_sync_is_recorded(
        location, pg_url, postgres_server) -> None:
    instance = dg.DagsterInstance.ephemeral()
    result, cursor = tick(location, "sync_errors_sensor", instance)
    assert result.asset_events[0].passed  # the recorded sync of 5 minutes ago succeeded
    with outage(postgres_server, pg_url):
        failed = location.resolve_job_def("reconciliation").execute_in_process(
            instance=instance, partition_key="c1", raise_on_error=False)
        assert not failed.success
        run = instance.get_run_by_id(failed.run_id)
        assert run is not None and run.tags["tally/cloud"] == "c1" and run.tags["tally/sync_status"] == "failed"
    # The store answers again and still holds the older success as the latest sync: Dagster's record of
    # the failed run keeps the check red (it is the cloud's latest sync), not "every sync succeeded".
    result, cursor = tick(location, "sync_errors_sensor", instance, cursor)
    [evaluation] = result.asset_events
    assert not evaluation.passed and evaluation.severity == dg.AssetCheckSeverity.ERROR
    assert f"c1 failed: run {failed.run_id[:8]} failed and could not record its sync" in evaluation.description
    # A later sync is recorded: the failure is history, the check is true again.
    store = open_store(pg_url)
    run_row(store, "c1", "succeeded", datetime.now(UTC))
    store.close()
    result, cursor = tick(location, "sync_errors_sensor", instance, cursor)
    assert result.asset_events[0].passed
