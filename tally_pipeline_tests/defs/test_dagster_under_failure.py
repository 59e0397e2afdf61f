"""The code location under failure and change, loaded as Dagster's code server loads it (issue #29):
one bad cloud never silences the rest, checks are never stale, partial is not success, config edits
apply everywhere alike."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.definitions.definitions_load_context import DefinitionsLoadContext
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
from dagster._grpc.server import LoadedRepositories

from tally_pipeline.runtime import Runtime

ROOT = Path(__file__).resolve().parents[2]
GOOD = "demo-a: {provider: simulated, seed: 1, resources: 20, hours: 6}\n"
TYPO = "demo-b: {provider: simulated, seed: 2, resorces: 20}\n"  # misspelled key


def write_config(tmp_path: Path, clouds: str, extra: str = "") -> Path:
    config = tmp_path / "tally.yaml"
    indented = "".join(f"  {line}\n" for line in clouds.splitlines())
    config.write_text(f"database: duckdb://{tmp_path / 'tally.duckdb'}\nclouds:\n{indented}{extra}")
    return config


@pytest.fixture
def location(tmp_path, monkeypatch) -> Iterator:
    """Load the code location from TALLY_CONFIG exactly as the code server does (LoadedRepositories over
    the module workspace.yaml names); yields a loader taking the config file."""
    saved = DefinitionsLoadContext._instance

    def load(config: Path, migrate: bool = True) -> dg.RepositoryDefinition:
        monkeypatch.setenv("TALLY_CONFIG", str(config))
        monkeypatch.delenv("TALLY_DATABASE", raising=False)
        if migrate:
            rt = Runtime.load(str(config), isolate_clouds=True)
            rt.store.migrate()
            rt.close()
        origin = LoadableTargetOrigin(executable_path=sys.executable, module_name="tally_pipeline.definitions",
                                      working_directory=str(ROOT))
        loaded = LoadedRepositories(origin, container_image=None, entry_point=[], container_context=None)
        [repo] = loaded.definitions_by_name.values()
        return repo

    yield load
    DefinitionsLoadContext._instance = saved


def sensor_tick(repo: dg.RepositoryDefinition, name: str, instance: dg.DagsterInstance, cursor: str | None = None):
    sensor = repo.get_sensor_def(name)
    # the resources the repository binds, as the daemon hands them to the tick
    with dg.build_sensor_context(instance=instance, cursor=cursor, repository_def=repo,
                                 resources=dict(repo.get_top_level_resources())) as context:
        return sensor.evaluate_tick(context), context.cursor


def evaluations(result) -> dict[str, dg.AssetCheckEvaluation]:
    return {e.check_name: e for e in result.asset_events or [] if isinstance(e, dg.AssetCheckEvaluation)}


def test_a_bad_cloud_entry_leaves_the_other_clouds_running(location, tmp_path) -> None:
    if True:
        repo = location(write_config(tmp_path, GOOD + TYPO))
        instance = dg.DagsterInstance.ephemeral()
        # The location loaded: schedules, syncs and every alert sensor are there.
        assert {s.name for s in repo.schedule_defs} >= {"reconciliation_schedule"}
        assert {"sync_errors_sensor", "sync_stale_sensor", "events_silent_sensor", "drift_high_sensor"} <= {
            s.name for s in repo.sensor_defs}
        job = repo.get_job("reconciliation")
        assert set(job.partitions_def.get_partition_keys()) == {"demo-a", "demo-b"}
        # The healthy cloud syncs.
        good = job.execute_in_process(partition_key="demo-a", instance=instance)
        assert good.success
        # The bad cloud's sync fails at once, its one-line reason naming the key.
        bad = job.execute_in_process(partition_key="demo-b", instance=instance, raise_on_error=False)
        assert not bad.success
        [failure] = [e for e in bad.all_events if e.event_type_value == "STEP_FAILURE"]
        message = failure.step_failure_data.error.message
        assert "clouds.demo-b.simulated.resorces: unknown key" in message.splitlines()[0]
        # launched without tags (as from the UI), it still names its cloud and its outcome: filtering
        # runs by cloud finds exactly this one
        tags = instance.get_run_by_id(bad.run_id).tags
        assert tags["tally/cloud"] == "demo-b" and tags["tally/sync_status"] == "failed"
        # The sync_errors check says the cloud is misconfigured.
        result, _ = sensor_tick(repo, "sync_errors_sensor", instance)
        check = evaluations(result)["sync_errors"]
        assert not check.passed and check.severity == dg.AssetCheckSeverity.ERROR
        assert "demo-b misconfigured" in check.description and "resorces: unknown key" in check.description


@pytest.mark.slow  # `dg check defs` in a subprocess, twice
@pytest.mark.parametrize(("text", "reason"), [
    ("database: [unclosed\n", "not valid YAML"),
    ("database: mysql://tally@db/tally\n", "database: Value error, must be a duckdb:///path or postgresql"),
])
def test_a_config_that_cannot_load_leads_with_its_reason(tmp_path, text, reason) -> None:
    config = tmp_path / "tally.yaml"
    config.write_text(text)
    env = {**os.environ, "TALLY_CONFIG": str(config), "DAGSTER_HOME": str(tmp_path)}
    env.pop("TALLY_DATABASE", None)
    (tmp_path / "dagster.yaml").write_text("")
    # as in a terminal: one stream, in the order written
    proc = subprocess.run([str(Path(sys.executable).with_name("dg")), "check", "defs"], cwd=ROOT, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    assert proc.returncode != 0
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    first = next(i for i, line in enumerate(lines) if "tally:" in line)
    assert reason in lines[first] and "tally.yaml" in lines[first]
    trace = next(i for i, line in enumerate(lines) if "Traceback" in line or "Stack Trace" in line)
    assert first < trace


FAILING = ("demo-a: {provider: simulated, seed: 1, resources: 20, hours: 6, failing_types: "
           "{instance: error, volume: error, floating_ip: error, image: error, load_balancer: error}}\n")
SYNC_SENSORS = ("sync_stale_sensor", "sync_errors_sensor", "drift_high_sensor")


def latest_check(instance: dg.DagsterInstance, check: str):
    key = dg.AssetCheckKey(dg.AssetKey("sync_runs"), check)
    return instance.event_log_storage.get_latest_asset_check_execution_by_key([key])[key]


def test_checks_are_true_on_the_tick_after_a_failed_ui_run(location, tmp_path) -> None:
    repo = location(write_config(tmp_path, FAILING))
    instance = dg.DagsterInstance.ephemeral()
    cursors = {}
    for name in SYNC_SENSORS:  # the sensors have looked once already: their state is in their cursors
        _, cursors[name] = sensor_tick(repo, name, instance)
    # The UI's Materialize on sync_runs: the implicit asset job, the asset and its checks selected.
    ui_job = repo.get_implicit_global_asset_job_def()
    run = ui_job.execute_in_process(partition_key="demo-a", instance=instance, raise_on_error=False,
                                    asset_selection=[dg.AssetKey("sync_runs"), dg.AssetKey("sync_deferrals")])
    assert not run.success
    # One tick of each sensor later, every check says its true state, as the daemon records it.
    for name in SYNC_SENSORS:
        result, _ = sensor_tick(repo, name, instance, cursor=cursors[name])
        for event in result.asset_events:
            instance.report_runless_asset_event(event)
    latest = {check: latest_check(instance, check) for check in ("sync_errors", "sync_stale", "drift_high")}
    assert {check: r.status.value for check, r in latest.items()} == {
        "sync_errors": "FAILED",  # firing: the sync failed
        "sync_stale": "FAILED",  # it never succeeded
        "drift_high": "SUCCEEDED",  # nothing was corrected
    }
    # each the sensor's word, not the failed run's (whose check steps never ran: "Execution failed")
    assert all(r.run_id != run.run_id for r in latest.values())


def test_an_unchanged_state_is_reported_every_tick_and_logged_once(location, tmp_path, capfd) -> None:
    repo = location(write_config(tmp_path, FAILING))
    instance = dg.DagsterInstance.ephemeral()
    repo.get_job("reconciliation").execute_in_process(partition_key="demo-a", instance=instance, raise_on_error=False)
    capfd.readouterr()
    cursor = None
    for _ in range(3):
        result, cursor = sensor_tick(repo, "sync_errors_sensor", instance, cursor=cursor)
        assert not evaluations(result)["sync_errors"].passed  # reported on every tick
    logged = [line for line in capfd.readouterr().err.splitlines() if "TallySyncErrors" in line]
    assert len(logged) == 1 and "FIRING" in logged[0]  # the terminal hears the change only


def step_failure(result) -> str:
    [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    return failure.step_failure_data.error.message


def test_a_partial_sync_is_a_failed_run_that_keeps_what_it_reconciled(location, tmp_path) -> None:
    partial = "demo-a: {provider: simulated, seed: 1, resources: 20, hours: 6, failing_types: {volume: error}}\n"
    repo = location(write_config(tmp_path, partial))
    instance = dg.DagsterInstance.ephemeral()
    result = repo.get_job("reconciliation").execute_in_process(partition_key="demo-a", instance=instance,
                                                               raise_on_error=False)
    assert not result.success  # the run list shows Failure, not Success
    assert step_failure(result).splitlines()[0].endswith("Failure: partial sync: demo-a: volume: AdapterError: "
                                                         "demo-a: listing volume failed (injected error)")
    assert instance.get_run_by_id(result.run_id).tags["tally/sync_status"] == "partial"
    # what it did reconcile is recorded: the materialization, with the per-type table
    [materialized] = [e for e in result.get_asset_materialization_events() if e.asset_key == dg.AssetKey("sync_runs")]
    assert materialized.step_materialization_data.materialization.metadata["status"].value == "partial"


@pytest.mark.slow
def test_a_refused_database_connection_leads_with_the_drivers_reason(location, tmp_path, pg_url) -> None:
    import uuid

    import psycopg

    from tally_pipeline.store import open_store

    open_store(pg_url, migrate=True).close()
    role = f"tally_denied_{uuid.uuid4().hex[:8]}"
    dbname = pg_url.rsplit("/", 1)[1]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'CREATE ROLE "{role}" LOGIN')
        conn.execute(f'REVOKE CONNECT ON DATABASE "{dbname}" FROM PUBLIC')
    try:
        config = write_config(tmp_path, GOOD)
        denied = pg_url.replace("postgres@", f"{role}@", 1)
        config.write_text(config.read_text().replace(f"duckdb://{tmp_path / 'tally.duckdb'}", denied))
        repo = location(config, migrate=False)
        result = repo.get_job("reconciliation").execute_in_process(
            partition_key="demo-a", instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
        assert not result.success
        first = step_failure(result).splitlines()[0]
        assert "StoreUnavailable: PostgreSQL unavailable" in first and "permission denied for database" in first
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f'GRANT CONNECT ON DATABASE "{dbname}" TO PUBLIC')
            conn.execute(f'DROP ROLE "{role}"')


def test_the_landing_sensor_warns_about_a_stray_folder_once(location, tmp_path, capfd) -> None:
    landing = tmp_path / "landing"
    (landing / "not-a-day").mkdir(parents=True)
    repo = location(write_config(tmp_path, GOOD, extra=f"landing_dir: {landing}\n"))
    instance = dg.DagsterInstance.ephemeral()
    capfd.readouterr()
    cursor = None
    for _ in range(3):
        result, cursor = sensor_tick(repo, "landing_files_sensor", instance, cursor=cursor)
        assert result.skip_message == "no new landing files (0 seen)"
    warned = [line for line in capfd.readouterr().err.splitlines() if "not-a-day" in line]
    assert len(warned) == 1


def test_an_edited_threshold_reaches_the_sensor_without_a_reload(location, tmp_path) -> None:
    from datetime import UTC, datetime, timedelta

    config = write_config(tmp_path, GOOD)
    rt = Runtime.load(str(config))
    rt.store.migrate()
    ten_minutes_ago = datetime.now(UTC) - timedelta(minutes=10)
    rt.store.run(lambda uow: uow.execute(
        "INSERT INTO cloud_activity (cloud, first_collector_event, last_collector_event, collector_events) "
        "VALUES (%s, %s, %s, 1)", ("demo-a", ten_minutes_ago, ten_minutes_ago)))
    rt.close()
    repo = location(config)
    instance = dg.DagsterInstance.ephemeral()
    before, cursor = sensor_tick(repo, "events_silent_sensor", instance)
    assert evaluations(before)["events_silent"].passed  # silent after the default hour: not yet
    # The edit a data engineer makes: lower the threshold to 5 minutes. No reload of the location.
    config.write_text(config.read_text() + "alerts: {events_silent_after: 300}\n")
    after, _ = sensor_tick(repo, "events_silent_sensor", instance, cursor=cursor)
    assert not evaluations(after)["events_silent"].passed
    # A change only a reload applies (a new cloud) is said by the settle-window sensor.
    config.write_text(config.read_text().replace("clouds:\n", "clouds:\n  demo-c: {provider: simulated}\n"))
    said, _ = sensor_tick(repo, "settle_window_sensor", instance)
    assert "config changed: clouds added demo-c" in said.skip_message and "reload" in said.skip_message


def test_daily_partitions_start_at_the_configured_first_day(location, tmp_path) -> None:
    from datetime import UTC, datetime, timedelta

    repo = location(write_config(tmp_path, GOOD, extra="first_day: 2026-11-01\n"))
    for job in ("usage_daily_job", "landing_files"):
        assert repo.get_job(job).partitions_def.get_first_partition_key() == "2026-11-01"
    default = location(write_config(tmp_path, GOOD))  # default: ledger.window_days (35) before today
    expected = (datetime.now(UTC).date() - timedelta(days=35)).isoformat()
    assert default.get_job("usage_daily_job").partitions_def.get_first_partition_key() == expected


def test_materializing_sync_runs_from_the_ui_evaluates_each_check_once(location, tmp_path) -> None:
    repo = location(write_config(tmp_path, GOOD))
    ui_job = repo.get_implicit_global_asset_job_def()  # the UI's Materialize: the asset and its checks
    run = ui_job.execute_in_process(partition_key="demo-a", instance=dg.DagsterInstance.ephemeral(),
                                    asset_selection=[dg.AssetKey("sync_runs"), dg.AssetKey("sync_deferrals")])
    assert run.success
    evaluated = [e.event_specific_data.check_name for e in run.all_events
                 if e.event_type_value == "ASSET_CHECK_EVALUATION"]
    assert {"sync_stale", "sync_errors", "drift_high", "service_events_silent"} <= set(evaluated)
    assert sorted(evaluated) == sorted(set(evaluated)), evaluated  # each once
