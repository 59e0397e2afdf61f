"""The Dagster code location: assets materialized in-process on both stores, schedules, sensors, checks, backfills."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest

from tally_pipeline.definitions import build_definitions
from tally_pipeline.defs.reconciliation.requests import follow_up_requests, reconciliation_requests
from tally_pipeline.fakes.static_view import StaticView
from tally_pipeline.orchestration.resources import Ledger, TallyStore
from tally_pipeline.providers.simulated.adapter import SimulatedAdapter
from tally_pipeline.providers.simulated.platform import PlatformRecord
from tally_pipeline.runtime import Runtime
from tally_pipeline.services.ingest import Ingestor
from tally_pipeline.store import asset_reads

pytestmark = pytest.mark.slow  # a real process or a long property search per test

T0 = datetime(2026, 3, 1, tzinfo=UTC)


class FixedClock:
    def __init__(self, now: datetime):
        self.value = now

    def now(self) -> datetime:
        return self.value


class Platforms:
    def __init__(self, view):
        self.view = view

    def adapter(self, cloud: str):
        return SimulatedAdapter(self.view, cloud, resource_types=("volume",))


def volume(rid: str, gb: int = 10, created: datetime = T0) -> PlatformRecord:
    return PlatformRecord("volume", rid, "p1", {"gb": gb, "volume_type": None}, "available", None, created, created, None, rid)


def vol_event(eid: str, rid: str, verb: str, when: datetime, cloud: str = "c1", gb: int = 10) -> dict:
    item = {"event_id": eid, "event_type": f"volume.{verb}.end", "cloud": cloud, "resource_type": "volume",
            "resource_id": rid, "occurred_at": when.isoformat(),
            "payload": {"size": {"gb": gb, "volume_type": None}} if verb != "delete" else {}}
    if verb == "create":
        item["project_id"] = "p1"
    return item


@pytest.fixture
def setup(store_url, tmp_path):
    config = tmp_path / "tally.yaml"
    landing = tmp_path / "landing"
    landing.mkdir()
    config.write_text(
        f"database: {store_url}\nlanding_dir: {landing}\n"
        "clouds:\n  c1: {provider: simulated, seed: 1}\n  c2: {provider: simulated, seed: 2}\n"
        "ledger: {ingest_lag: 60, window_days: 35}\nfirst_day: 2026-01-01\n"
    )
    rt = Runtime.load(str(config))
    rt.store.migrate()
    view = StaticView.of([])
    clock = FixedClock(T0 + timedelta(days=1))
    store = TallyStore(config_path=str(config))
    resources = {"store": store, "ledger": Ledger(config_path=str(config)), "adapters": Platforms(view), "clock": clock}
    defs = build_definitions(["c1", "c2"], resources)
    yield {"defs": defs, "rt": rt, "view": view, "clock": clock, "landing": landing, "config": config,
           "instance": dg.DagsterInstance.ephemeral()}
    rt.close()


def materializations(result, key: str) -> list[dict]:
    return [{k: v.value for k, v in e.step_materialization_data.materialization.metadata.items()}
            for e in result.get_asset_materialization_events() if e.asset_key == dg.AssetKey(key)]


def check_results(result) -> dict[str, bool]:
    return {e.event_specific_data.check_name: e.event_specific_data.passed
            for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"}


def test_landing_files_to_projection_to_ledger(setup) -> None:
    defs, rt, landing = setup["defs"], setup["rt"], setup["landing"]
    day = landing / "2026-03-01"
    day.mkdir()
    (day / "batch-1.jsonl").write_text("\n".join(__import__("json").dumps(e) for e in [
        vol_event("l1", "v1", "create", T0), vol_event("l2", "v2", "create", T0 + timedelta(hours=1), gb=20)]) + "\nnot json\n")
    result = defs.resolve_job_def("landing_files").execute_in_process(partition_key="2026-03-01", instance=setup["instance"])
    assert result.success
    [meta] = materializations(result, "raw_event_batches")
    assert (meta["files"], meta["stored"], meta["rejected"]) == (1, 2, 1)
    assets = [a for a in defs.assets if isinstance(a, dg.AssetsDefinition)]
    materialized = dg.materialize(
        [a for a in assets if {k.to_user_string() for k in a.keys} & {"event_log", "dead_letter", "current_resources"}],
        resources=defs.resources, instance=setup["instance"])
    assert materialized.success
    assert materializations(materialized, "event_log")[0]["dagster/row_count"] == 2
    assert materializations(materialized, "dead_letter")[0]["dagster/row_count"] == 1
    assert materializations(materialized, "current_resources")[0]["live"] == 2
    posted = defs.resolve_job_def("delta_posting").execute_in_process(
        instance=setup["instance"], tags={"tally/now": (T0 + timedelta(days=1)).isoformat()})
    assert posted.success
    assert check_results(posted) == {"ledger_balanced": True, "postings_match_usage": True,
                                     "ledger_entities_skipped": True}
    assert materializations(posted, "ledger_postings")[0]["postings"] == 1  # one entity: c1/p1/volume_gb_hours
    amount = rt.store.query("SELECT sum(amount) FROM ledger_postings")[0][0]
    lag = 1 / 60  # ingest_lag 60 s: the clamp is a minute before now
    assert float(amount) == pytest.approx(10 * (24 - lag) + 20 * (23 - lag), abs=1e-5)


def test_reconciliation_job_uses_the_tick_as_poll_time_and_run_key(setup) -> None:
    defs, rt, view = setup["defs"], setup["rt"], setup["view"]
    view.records_by_type["volume"] = [volume("v9", created=T0)]
    tick = T0 + timedelta(hours=6)
    [request] = [r for r in reconciliation_requests(["c1"], tick)]
    result = defs.resolve_job_def("reconciliation").execute_in_process(
        partition_key=request.partition_key, instance=setup["instance"], tags=request.tags)
    assert result.success
    [meta] = materializations(result, "sync_runs")
    assert meta["created"] == 1 and meta["run_key"] == "tick:2026-03-01T06:00:00Z"
    row = rt.store.query("SELECT run_key, poll_time, status FROM sync_runs")
    assert row[0][0] == "tick:2026-03-01T06:00:00Z" and row[0][1] == tick and row[0][2] == "succeeded"
    # A retried tick writes the same synthetic ids: nothing new.
    events = rt.store.event_count()
    again = defs.resolve_job_def("reconciliation").execute_in_process(
        partition_key="c1", instance=setup["instance"], tags=request.tags)
    assert again.success and rt.store.event_count() == events


def test_schedule_requests_one_run_per_cloud_at_a_tick(setup) -> None:
    schedule = setup["defs"].resolve_schedule_def("reconciliation_schedule")
    tick = datetime(2026, 3, 1, 12, 10, tzinfo=UTC)
    context = dg.build_schedule_context(scheduled_execution_time=tick, instance=setup["instance"],
                                        repository_def=setup["defs"].get_repository_def())
    requests = list(schedule.evaluate_tick(context).run_requests)
    assert [(r.partition_key, r.run_key, r.tags["tally/poll_time"], r.tags["tally/run_key"], r.tags["tally/cloud"])
            for r in requests] == [
        ("c1", "c1@2026-03-01T12:10:00Z", "2026-03-01T12:10:00Z", "tick:2026-03-01T12:10:00Z", "c1"),
        ("c2", "c2@2026-03-01T12:10:00Z", "2026-03-01T12:10:00Z", "tick:2026-03-01T12:10:00Z", "c2"),
    ]
    assert schedule.cron_schedule == "*/10 * * * *"


def test_settle_window_sensor_requests_a_follow_up_only_when_due(setup) -> None:
    defs, rt, view = setup["defs"], setup["rt"], setup["view"]
    fresh = T0 + timedelta(hours=5, minutes=58)
    view.records_by_type["volume"] = [volume("v-new", created=fresh)]
    tick = T0 + timedelta(hours=6)
    [request] = reconciliation_requests(["c1"], tick)
    defs.resolve_job_def("reconciliation").execute_in_process(partition_key="c1", instance=setup["instance"], tags=request.tags)
    assert follow_up_requests(asset_reads.due_follow_ups(rt.store, tick + timedelta(seconds=60)), ["c1", "c2"],
                              tick + timedelta(seconds=60)) == []  # not yet due
    due = follow_up_requests(asset_reads.due_follow_ups(rt.store, fresh + timedelta(seconds=301)), ["c1", "c2"],
                             fresh + timedelta(seconds=301))
    assert [(r.partition_key, r.run_key) for r in due] == [("c1", "c1@follow-up:2026-03-01T06:03:00Z")]
    sensor = defs.resolve_sensor_def("settle_window_sensor")
    with dg.build_sensor_context(instance=setup["instance"], repository_def=defs.get_repository_def(),
                                 resources={"store": defs.resources["store"]}) as context:
        result = sensor.evaluate_tick(context)  # wall clock: long past the settle window
    assert [r.partition_key for r in result.run_requests] == ["c1"]


def test_single_run_backfill_over_a_range_of_days(setup) -> None:
    defs, rt = setup["defs"], setup["rt"]
    setup["clock"].value = T0 + timedelta(days=5)
    Ingestor(rt.store, rt.registry).ingest([vol_event("b1", "vb", "create", T0), vol_event("b2", "vb", "delete", T0 + timedelta(days=2, hours=12))], origin="t")
    job = defs.resolve_job_def("usage_daily_job")
    result = job.execute_in_process(instance=setup["instance"], tags={
        "dagster/asset_partition_range_start": "2026-03-01", "dagster/asset_partition_range_end": "2026-03-03"})
    assert result.success
    runs = setup["instance"].get_runs()
    assert len(runs) == 1  # one run for three days
    rows = rt.store.query("SELECT day, quantity FROM usage_daily WHERE meter = 'volume_gb_hours' ORDER BY day")
    assert [(str(d), float(q)) for d, q in rows] == [("2026-03-01", 240.0), ("2026-03-02", 240.0), ("2026-03-03", 120.0)]
    # One run, but each day's materialization carries that day's own figures, not the range's.
    per_day = {e.partition: {k: v.value for k, v in e.step_materialization_data.materialization.metadata.items()}
               for e in result.get_asset_materialization_events() if e.asset_key == dg.AssetKey("usage_daily")}
    assert sorted(per_day) == ["2026-03-01", "2026-03-02", "2026-03-03"]
    assert [per_day[d]["dagster/row_count"] for d in sorted(per_day)] == [1, 1, 1]
    assert "| volume_gb_hours | 120" in per_day["2026-03-03"]["totals_by_meter"]
    assert "| volume_gb_hours | 240" in per_day["2026-03-01"]["totals_by_meter"]
    assert {m["computed_in_run"] for m in per_day.values()} == {"2026-03-01..2026-03-03"}


def test_nightly_usage_schedule_computes_the_day_that_ended(setup) -> None:
    defs = setup["defs"]
    schedule = defs.resolve_schedule_def("usage_daily_schedule")
    assert schedule.cron_schedule == "30 0 * * *"
    tick = datetime(2026, 12, 2, 0, 30, tzinfo=UTC)
    context = dg.build_schedule_context(scheduled_execution_time=tick, instance=setup["instance"],
                                        repository_def=defs.get_repository_def())
    [request] = list(schedule.evaluate_tick(context).run_requests)
    assert request.partition_key == "2026-12-01"


def landing_sensor_tick(setup, cursor):
    sensor = setup["defs"].resolve_sensor_def("landing_files_sensor")
    with dg.build_sensor_context(instance=setup["instance"], cursor=cursor, repository_def=setup["defs"].get_repository_def(),
                                 resources={"store": setup["defs"].resources["store"]}) as context:
        result = sensor.evaluate_tick(context)
        return [r.partition_key for r in result.run_requests or []], context.cursor


def test_landing_sensor_picks_up_files_copied_with_old_timestamps(setup) -> None:
    import os
    import shutil

    landing = setup["landing"]
    (landing / "2026-03-01").mkdir()
    fresh = landing / "2026-03-01" / "new.jsonl"
    fresh.write_text(json.dumps(vol_event("s1", "vs", "create", T0)) + "\n")
    requested, cursor = landing_sensor_tick(setup, None)
    assert requested == ["2026-03-01"]
    assert landing_sensor_tick(setup, cursor)[0] == []  # seen: nothing new
    # A backlog arrives with last week's timestamps: copied (cp -p / rsync -a) and moved (mv) in.
    old = (T0 - timedelta(days=7)).timestamp()
    backlog = setup["config"].parent / "backlog.jsonl"
    backlog.write_text(json.dumps(vol_event("s2", "vs2", "create", T0)) + "\n")
    os.utime(backlog, (old, old))
    (landing / "2026-03-02").mkdir()
    shutil.copy2(backlog, landing / "2026-03-02" / "copied.jsonl")
    moved = setup["config"].parent / "moved.jsonl"
    shutil.copy2(backlog, moved)
    (landing / "2026-02-28").mkdir()
    os.rename(moved, landing / "2026-02-28" / "moved.jsonl")
    assert (landing / "2026-03-02" / "copied.jsonl").stat().st_mtime < fresh.stat().st_mtime
    requested, cursor = landing_sensor_tick(setup, cursor)
    assert requested == ["2026-02-28", "2026-03-02"]
    assert landing_sensor_tick(setup, cursor)[0] == []


def test_landing_sensor_takes_a_former_mtime_cursor_as_seen(setup) -> None:
    landing = setup["landing"]
    (landing / "2026-03-01").mkdir()
    (landing / "2026-03-01" / "a.jsonl").write_text(json.dumps(vol_event("s1", "vs", "create", T0)) + "\n")
    stamp = (landing / "2026-03-01" / "a.jsonl").stat().st_mtime
    assert landing_sensor_tick(setup, str(stamp))[0] == []
    assert landing_sensor_tick(setup, str(stamp - 1))[0] == ["2026-03-01"]


def test_blocking_audit_check_stops_posting_when_the_ledger_does_not_add_up(setup) -> None:
    defs, rt = setup["defs"], setup["rt"]
    Ingestor(rt.store, rt.registry).ingest([vol_event("a1", "va", "create", T0)], origin="t")
    ok = defs.resolve_job_def("delta_posting").execute_in_process(instance=setup["instance"],
                                                                 tags={"tally/now": (T0 + timedelta(hours=5)).isoformat()})
    assert ok.success and check_results(ok)["ledger_balanced"]
    rt.store.run(lambda uow: uow.execute("UPDATE ledger_postings SET amount = amount + 1"))  # corrupt the ledger
    before = rt.store.query("SELECT count(*) FROM ledger_postings")[0][0]
    blocked = defs.resolve_job_def("delta_posting").execute_in_process(
        instance=setup["instance"], raise_on_error=False, tags={"tally/now": (T0 + timedelta(hours=9)).isoformat()})
    assert not blocked.success
    assert check_results(blocked)["ledger_balanced"] is False
    assert rt.store.query("SELECT count(*) FROM ledger_postings")[0][0] == before  # nothing posted


def test_an_excluded_interval_fails_the_audit_without_stopping_the_cycle(setup) -> None:
    from tally_pipeline_tests.ledger_data import Row, insert

    defs, rt = setup["defs"], setup["rt"]
    Ingestor(rt.store, rt.registry).ingest([vol_event("a1", "va", "create", T0)], origin="t")
    first = defs.resolve_job_def("delta_posting").execute_in_process(
        instance=setup["instance"], tags={"tally/now": (T0 + timedelta(hours=5)).isoformat()})
    assert first.success and check_results(first)["ledger_balanced"]
    # a history the meter cannot read (a looser custom schema let it in), in another project
    insert(rt.store, Row("p2", "vb", T0, None, {"gb": "ten"}, resource_type="volume"))
    second = defs.resolve_job_def("delta_posting").execute_in_process(
        instance=setup["instance"], tags={"tally/now": (T0 + timedelta(hours=9)).isoformat()})
    assert second.success  # the cycle ran: the audit before it still saw a clean latest cycle
    assert check_results(second)["ledger_entities_skipped"] is False  # the alert's check sees the exclusion
    before = rt.store.query("SELECT count(*) FROM ledger_postings")[0][0]
    third = defs.resolve_job_def("delta_posting").execute_in_process(
        instance=setup["instance"], tags={"tally/now": (T0 + timedelta(hours=13)).isoformat()})
    # red, with WARN severity: visible, and p1's usage is still posted (a blocked cycle would bill nobody)
    [audit] = [e.event_specific_data for e in third.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"
               and e.event_specific_data.check_name == "ledger_balanced"]
    assert audit.passed is False and audit.severity == dg.AssetCheckSeverity.WARN
    assert third.success
    assert rt.store.query("SELECT count(*) FROM ledger_postings")[0][0] == before + 1  # p1's four more hours


def test_asset_definitions_tell_the_story(setup, store_url) -> None:
    from tally_pipeline.store.catalog import table_columns

    defs = setup["defs"]
    graph = defs.resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    assert keys == {"raw_event_batches", "event_log", "cloud_activity", "dead_letter", "current_resources",
                    "resource_intervals", "projection_state", "sync_runs", "sync_deferrals", "usage_daily",
                    "ledger_audit", "ledger_postings", "usage_checkpoints", "ledger_cycles", "ledger_skips",
                    "usage_statements"}
    dialect = "duckdb" if store_url.startswith("duckdb") else "postgres"
    other = {"duckdb": "postgres", "postgres": "duckdb"}[dialect]
    for key in graph.get_all_asset_keys():
        node = graph.get(key)
        assert node.group_name in ("ingest", "projection", "reconciliation", "usage", "ledger"), key
        assert node.kinds and node.description, key
        assert other not in node.kinds, (key, node.kinds)  # the configured database only
        # ... on the assets that are tables of it: the landing files and the ledger's audit are not
        table = key.to_user_string() not in ("raw_event_batches", "ledger_audit")
        assert (dialect in node.kinds) is table, (key, node.kinds)
    # The sync reads the projection: an edge, not a hidden read. Its kinds name the clouds' real provider.
    sync = graph.get(dg.AssetKey("sync_runs"))
    assert {dg.AssetKey("current_resources"), dg.AssetKey("resource_intervals")} <= set(sync.parent_keys)
    assert "simulated" in sync.kinds and "openstack" not in sync.kinds
    # "All" partitions from the UI or GraphQL: one run per cloud, each under the per-cloud limit.
    assert sync.backfill_policy == dg.BackfillPolicy.multi_run(1)
    # The catalog: each table-backed asset names its table and columns, from the migrations.
    specs = {s.key.to_user_string(): s for a in defs.assets for s in a.specs}
    event_log = specs["event_log"]
    assert event_log.metadata["dagster/table_name"] == "events" and "`events`" in event_log.description
    columns = [c.name for c in event_log.metadata["dagster/column_schema"].columns]
    assert columns == [c.name for c in table_columns(dialect)["events"]] and "occurred_at" in columns
    assert specs["dead_letter"].metadata["dagster/table_name"] == "rejected_events"
    assert specs["sync_deferrals"].metadata["dagster/table_name"] == "sync_deferrals"
    # Automation: event_log is not held back by days of raw_event_batches that were never materialized.
    assert graph.get(dg.AssetKey("current_resources")).automation_condition is not None
    assert "any_deps_missing" not in str(graph.get(dg.AssetKey("event_log")).automation_condition)
    assert graph.get(dg.AssetKey("usage_daily")).backfill_policy == dg.BackfillPolicy.single_run()
    [auto] = [s for s in defs.sensors if isinstance(s, dg.AutomationConditionSensorDefinition)]
    assert auto.default_status == dg.DefaultSensorStatus.RUNNING


def test_monthly_statement_waits_then_states_then_restates_late_usage(setup) -> None:
    defs, rt, clock, instance = setup["defs"], setup["rt"], setup["clock"], setup["instance"]
    job = defs.resolve_job_def("usage_statements_job")
    ingestor = Ingestor(rt.store, rt.registry)
    ingestor.ingest([vol_event("s1", "vs", "create", datetime(2026, 2, 10, tzinfo=UTC))], origin="t")

    def run_month() -> dg.ExecuteInProcessResult:
        result = job.execute_in_process(partition_key="2026-02", instance=instance)
        assert result.success
        return result

    def observed(result) -> dict:
        [event] = [e for e in result.all_events if e.event_type_value == "ASSET_OBSERVATION"]
        return {k: v.value for k, v in event.event_specific_data.asset_observation.metadata.items()}

    # February has not ended by the ingest lag (60 s): the run succeeds, materializes nothing, says why
    clock.value = T0 + timedelta(seconds=30)
    waiting = run_month()
    assert materializations(waiting, "usage_statements") == []
    seen = observed(waiting)
    assert (seen["clouds_waiting"], seen["clouds_stated"]) == (1, 0) and "month_open" in seen["waits"]
    assert "ledger_behind" in seen["waits"] or "ledger_not_posted" in seen["waits"]

    # the ledger posts through the month's end: the month is stated
    clock.value = T0 + timedelta(seconds=60)
    Ledger(config_path=str(setup["config"])).post(clock.value)
    [stated] = materializations(run_month(), "usage_statements")
    assert (stated["clouds_stated"], stated["new_versions"], stated["restated_lines"], stated["dagster/row_count"]) == (
        1, 1, 0, 1)
    first = rt.store.query("SELECT version, quantity FROM usage_statements WHERE cloud = 'c1' AND month = '2026-02'")
    assert [(v, float(q)) for v, q in first] == [(1, 19 * 24 * 10.0)]
    if rt.store.dialect == "duckdb":  # the analysts' Parquet snapshot holds the statement (Postgres serves them directly)
        import duckdb

        folder = Path(str(stated["analyst_snapshot"]))
        parquet = duckdb.sql(f"SELECT month, version, quantity FROM '{folder / 'usage_statements.parquet'}'").fetchall()
        assert [(m, v, float(q)) for m, v, q in parquet] == [("2026-02", 1, 4560.0)]

    # late usage for February: the next cycle posts it, the next run re-states it as version 2
    ingestor.ingest([vol_event("s2", "vt", "create", datetime(2026, 2, 20, tzinfo=UTC)),
                     vol_event("s3", "vt", "delete", datetime(2026, 2, 20, 6, tzinfo=UTC))], origin="t")
    clock.value = T0 + timedelta(hours=1)
    assert materializations(run_month(), "usage_statements") == []  # the ledger does not hold it yet: it waits
    Ledger(config_path=str(setup["config"])).post(clock.value)
    [restated] = materializations(run_month(), "usage_statements")
    assert (restated["new_versions"], restated["restated_lines"]) == (1, 1)
    rows = rt.store.query("SELECT version, quantity, previous_quantity, difference FROM usage_statements "
                          "WHERE cloud = 'c1' AND month = '2026-02' ORDER BY version")
    assert [tuple(float(x) if x is not None else None for x in r[1:]) for r in rows] == [
        (4560.0, None, 4560.0), (4620.0, 4560.0, 60.0)]


def test_nightly_statement_schedule_asks_for_the_two_months_that_ended(setup) -> None:
    defs = setup["defs"]
    schedule = defs.resolve_schedule_def("usage_statements_schedule")
    tick = datetime(2026, 3, 2, 2, 0, tzinfo=UTC)
    context = dg.build_schedule_context(scheduled_execution_time=tick, instance=setup["instance"],
                                        repository_def=defs.get_repository_def())
    requests = list(schedule.evaluate_tick(context).run_requests)
    assert [r.partition_key for r in requests] == ["2026-01", "2026-02"]
    # the first month of the partitions has none before it
    context = dg.build_schedule_context(scheduled_execution_time=datetime(2026, 2, 2, 2, tzinfo=UTC),
                                        instance=setup["instance"], repository_def=defs.get_repository_def())
    assert [r.partition_key for r in schedule.evaluate_tick(context).run_requests] == ["2026-01"]


def test_catalog_columns_are_the_database_columns(store) -> None:
    """The column schema read from the migrations is what the migrated database really has."""
    from tally_pipeline.store.catalog import table_columns

    for table, columns in table_columns(store.dialect).items():
        real = [r[0] for r in store.query(
            "SELECT column_name FROM information_schema.columns WHERE table_name = %s ORDER BY ordinal_position", [table])]
        assert [c.name for c in columns] == real, table


def test_backfill_after_an_outage_posts_the_corrections(setup) -> None:
    """Landing files for the outage days are ingested, usage_daily backfilled in one run, and the next
    posting cycle posts what the outage hid."""
    import json

    defs, rt, landing, instance = setup["defs"], setup["rt"], setup["landing"], setup["instance"]
    setup["clock"].value = T0 + timedelta(days=4)
    Ingestor(rt.store, rt.registry).ingest([vol_event("o1", "v-old", "create", T0 - timedelta(days=1))], origin="t")
    first = defs.resolve_job_def("delta_posting").execute_in_process(instance=instance, tags={"tally/now": (T0 + timedelta(days=3)).isoformat()})
    assert first.success
    before = float(rt.store.query("SELECT sum(amount) FROM ledger_postings")[0][0])
    # The outage: a collector's backlog for 1–2 March lands as files, after the cycle above.
    for day, events in {"2026-03-01": [vol_event("o2", "v-out", "create", T0 + timedelta(hours=2), gb=100)],
                        "2026-03-02": [vol_event("o3", "v-out", "delete", T0 + timedelta(days=1, hours=2))]}.items():
        (landing / day).mkdir()
        (landing / day / "backlog.jsonl").write_text("\n".join(json.dumps(e) for e in events))
    ingested = defs.resolve_job_def("landing_files").execute_in_process(instance=instance, tags={
        "dagster/asset_partition_range_start": "2026-03-01", "dagster/asset_partition_range_end": "2026-03-02"})
    assert ingested.success
    assert [(m["stored"], m["files"]) for m in materializations(ingested, "raw_event_batches")] == [(1, 1), (1, 1)]
    backfill = defs.resolve_job_def("usage_daily_job").execute_in_process(instance=instance, tags={
        "dagster/asset_partition_range_start": "2026-03-01", "dagster/asset_partition_range_end": "2026-03-02"})
    assert backfill.success
    daily = dict(rt.store.query("SELECT day, sum(quantity) FROM usage_daily WHERE meter = 'volume_gb_hours' GROUP BY day"))
    assert {str(d): float(q) for d, q in daily.items()} == {"2026-03-01": 240 + 100 * 22, "2026-03-02": 240 + 100 * 2}
    second = defs.resolve_job_def("delta_posting").execute_in_process(instance=instance, tags={"tally/now": (T0 + timedelta(days=3, hours=1)).isoformat()})
    assert second.success and check_results(second)["postings_match_usage"]
    after = float(rt.store.query("SELECT sum(amount) FROM ledger_postings")[0][0])
    # the outage's 24 hours of a 100 GiB volume, plus one more hour of the old volume
    assert after - before == pytest.approx(100 * 24 + 10 * 1, abs=1e-5)


def automation_tick(defs, instance, cursor):
    """One tick of the automation sensor: evaluate every asset's condition, then launch what it requests
    (in process, as the daemon would launch it)."""
    result = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=cursor)
    requested = sorted(r.key.to_user_string() for r in result.results if r.true_subset.size)
    if requested:
        job = defs.resolve_implicit_global_asset_job_def()
        run = job.execute_in_process(instance=instance, asset_selection=[dg.AssetKey(k) for k in requested])
        assert run.success
    return requested, result.cursor


def api_writes_look(defs, instance):
    """One evaluation of api_writes_sensor; nothing it returns is recorded or launched."""
    with dg.build_sensor_context(instance=instance, repository_def=defs.get_repository_def(),
                                 resources={"store": defs.resources["store"]}) as context:
        return defs.resolve_sensor_def("api_writes_sensor").evaluate_tick(context)


def api_writes_tick(defs, instance, *, launch: bool = True) -> tuple[set[str], list[str]]:
    """One tick of api_writes_sensor, as the daemon runs it: its asset events recorded and (with ``launch``) its
    runs launched; returns the assets it recorded and those its runs materialized."""
    result = api_writes_look(defs, instance)
    for event in result.asset_events:
        instance.report_runless_asset_event(event)
    launched: list[str] = []
    for request in result.run_requests if launch else []:
        job = request.job_name or defs.resolve_sensor_def("api_writes_sensor").job_name
        run = defs.resolve_job_def(job).execute_in_process(instance=instance)
        assert run.success
        launched += sorted(e.asset_key.to_user_string() for e in run.get_asset_materialization_events())
    return {e.asset_key.to_user_string() for e in result.asset_events}, launched


def test_automation_refreshes_the_projections_after_api_writes(setup) -> None:
    defs, rt, instance = setup["defs"], setup["rt"], setup["instance"]
    # A new deployment: the first tick only records the state (Dagster's first evaluation never requests);
    # from the next one the never-materialized event log and then the projections are filled in, even
    # though no day of raw_event_batches was ever materialized (its missing days must not block event_log).
    ticks = []
    cursor = None
    for _ in range(5):
        requested, cursor = automation_tick(defs, instance, cursor)
        ticks.append(requested)
    assert ticks[0] == []
    assert set(ticks[1]) == {"event_log", "cloud_activity", "dead_letter", "current_resources", "resource_intervals",
                             "projection_state"}, ticks
    assert ticks[2:] == [[], [], []], ticks  # settled
    # The API stores events; its sensor records them as a materialization of event_log ... (the refresh run the
    # sensor also starts is left out here: automation follows an event_log nobody folded by itself too)
    Ingestor(rt.store, rt.registry).ingest([vol_event("api-1", "v-api", "create", T0)], origin="api")
    recorded, _ = api_writes_tick(defs, instance, launch=False)
    assert recorded >= {"event_log", "cloud_activity"}
    # ... and the next automation tick refreshes the projections, which now hold the new volume.
    requested, cursor = automation_tick(defs, instance, cursor)
    assert {"current_resources", "resource_intervals", "projection_state"} <= set(requested)
    latest = instance.get_latest_materialization_event(dg.AssetKey("current_resources"))
    assert latest.asset_materialization.metadata["live"].value == 1
    assert rt.store.query("SELECT status FROM current_resources WHERE resource_id = 'v-api'") == [("live",)]


def test_an_api_write_recorded_as_the_projection_run_ends_is_folded_all_the_same(setup) -> None:
    """The race of one automation tick: a projection run ends and api_writes_sensor records a new API write
    before automation looks again. Automation's eager() lets the asset's own update cancel its dependency's
    (both land in one tick), so left to automation the write waited for the next one; the sensor starts the
    refresh itself, and automation starts no second run."""
    defs, rt, instance = setup["defs"], setup["rt"], setup["instance"]
    cursor = None
    for _ in range(3):
        _, cursor = automation_tick(defs, instance, cursor)  # filled in and settled
    projection = {"current_resources", "resource_intervals", "projection_state"}
    ticks = []
    for n in (1, 2):
        Ingestor(rt.store, rt.registry).ingest([vol_event(f"api-{n}", f"v-{n}", "create", T0)], origin="api")
        _, launched = api_writes_tick(defs, instance)
        assert set(launched) == projection
        # the projection run has ended and the write was recorded since automation last looked
        requested, cursor = automation_tick(defs, instance, cursor)
        ticks.append(requested)
    assert ticks == [[], []]  # nothing needless: the sensor's run folded each write
    assert dict(rt.store.query("SELECT resource_id, status FROM current_resources")) == {"v-1": "live", "v-2": "live"}
    latest = instance.get_latest_materialization_event(dg.AssetKey("current_resources"))
    assert latest.asset_materialization.metadata["live"].value == 2
    # A look that finds nothing new starts nothing.
    assert api_writes_tick(defs, instance) == (set(), [])


def test_a_sync_launched_without_tags_carries_its_cloud_and_records_every_write(setup) -> None:
    """As the UI's Materialize or GraphQL launch it: one partition, no tally tags."""
    defs, view, instance = setup["defs"], setup["view"], setup["instance"]
    view.records_by_type["volume"] = [volume("v-ui", created=T0)]
    job = defs.resolve_implicit_global_asset_job_def()
    result = job.execute_in_process(instance=instance, partition_key="c1",
                                    asset_selection=[dg.AssetKey("sync_runs"), dg.AssetKey("sync_deferrals")])
    assert result.success
    assert instance.get_run_by_id(result.run_id).tags["tally/cloud"] == "c1"
    written = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
    # The sync wrote a sync.create into events and re-folded the projection: both are recorded.
    assert {"sync_runs", "sync_deferrals", "event_log", "cloud_activity", "current_resources",
            "resource_intervals", "projection_state"} <= written
    [meta] = materializations(result, "sync_runs")
    assert meta["created"] == 1 and meta["status"] == "succeeded" and meta["drift"].endswith("%")
    # The sync checks are reported in the sync's own run (so the asset page never shows "not evaluated"),
    # and c2, which never synced, keeps sync_errors and drift_high from being green.
    checks = {e.event_specific_data.check_name: e.event_specific_data for e in result.all_events
              if e.event_type_value == "ASSET_CHECK_EVALUATION"}
    assert {"sync_stale", "sync_errors", "drift_high", "events_silent"} <= set(checks)
    assert not checks["sync_errors"].passed and checks["sync_errors"].metadata["never_synced"].value == "c2"
    assert checks["sync_errors"].severity == dg.AssetCheckSeverity.WARN
    # The api_writes sensor does not record the sync's writes a second time (that would start a
    # projection run for events already folded).
    looked = api_writes_look(defs, instance)
    assert "event_log" not in {e.asset_key.to_user_string() for e in looked.asset_events or []}


def test_the_posting_cycle_records_the_fold_it_runs(setup) -> None:
    defs, rt, instance = setup["defs"], setup["rt"], setup["instance"]
    Ingestor(rt.store, rt.registry).ingest([vol_event("p1", "vp", "create", T0)], origin="t")
    posted = defs.resolve_job_def("delta_posting").execute_in_process(
        instance=instance, tags={"tally/now": (T0 + timedelta(hours=5)).isoformat()})
    assert posted.success
    [fold] = materializations(posted, "current_resources")
    assert fold["refreshed_by"] == "delta_posting_cycle" and fold["refolded_resources"] == 1 and fold["live"] == 1
    assert materializations(posted, "resource_intervals")[0]["dagster/row_count"] == 1
    # Nothing pending: the next cycle folds nothing and records no projection write.
    again = defs.resolve_job_def("delta_posting").execute_in_process(
        instance=instance, tags={"tally/now": (T0 + timedelta(hours=6)).isoformat()})
    assert again.success and materializations(again, "current_resources") == []


def test_a_failed_sync_still_reports_its_checks_red(setup) -> None:
    defs, view, instance = setup["defs"], setup["view"], setup["instance"]
    view.failures["volume"] = "error"  # the only listed type fails: the run fails
    [request] = reconciliation_requests(["c1"], T0 + timedelta(hours=6))
    result = defs.resolve_job_def("reconciliation").execute_in_process(
        partition_key="c1", instance=instance, tags=request.tags, raise_on_error=False)
    assert not result.success
    checks = {e.event_specific_data.check_name: e.event_specific_data for e in result.all_events
              if e.event_type_value == "ASSET_CHECK_EVALUATION"}
    assert not checks["sync_errors"].passed and checks["sync_errors"].severity == dg.AssetCheckSeverity.ERROR
    observed = [e for e in result.all_events if e.event_type_value == "ASSET_OBSERVATION"]
    assert observed and observed[0].event_specific_data.asset_observation.metadata["status"].value == "failed"


def test_the_shipped_instance_holds_one_run_per_cloud(tmp_path) -> None:
    """deploy/embedded/dagster.yaml, as copied into DAGSTER_HOME, limits runs per tally/cloud and per partition
    (a run launched from the UI or GraphQL carries its partition tag when it is queued)."""
    import shutil
    from pathlib import Path

    shutil.copy(Path(__file__).resolve().parents[2] / "deploy" / "embedded" / "dagster.yaml", tmp_path / "dagster.yaml")
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        limits = instance.get_concurrency_config().run_queue_config.tag_concurrency_limits
    per_value = {limit["key"]: limit["limit"] for limit in limits if limit["value"] == {"applyLimitPerUniqueValue": True}}
    assert per_value == {"tally/cloud": 1, "dagster/partition": 1}


def test_projection_and_posting_runs_leave_a_parquet_snapshot_for_analysts(setup, store_url) -> None:
    import polars as pl

    defs, rt = setup["defs"], setup["rt"]
    folder = Path(store_url.removeprefix("duckdb://")).parent / "snapshot" if store_url.startswith("duckdb") else None
    Ingestor(rt.store, rt.registry).ingest([vol_event("s1", "v1", "create", T0), vol_event("s2", "v2", "create", T0)],
                                           origin="t")
    assets = [a for a in defs.assets if isinstance(a, dg.AssetsDefinition)]
    projected = dg.materialize([a for a in assets if "current_resources" in {k.to_user_string() for k in a.keys}],
                               resources=defs.resources, instance=setup["instance"])
    assert projected.success
    noted = materializations(projected, "current_resources")[0].get("analyst_snapshot")
    if folder is None:  # Postgres: analysts read the tables directly; no snapshot is taken
        assert noted is None
        return
    assert noted == str(folder)
    assert pl.read_parquet(folder / "current_resources.parquet").height == 2
    assert pl.read_parquet(folder / "ledger_postings.parquet").height == 0
    posted = defs.resolve_job_def("delta_posting").execute_in_process(
        instance=setup["instance"], tags={"tally/now": (T0 + timedelta(days=1)).isoformat()})
    assert posted.success
    assert pl.read_parquet(folder / "ledger_postings.parquet").height == 1  # the posting run refreshed it
    assert materializations(posted, "ledger_postings")[0]["analyst_snapshot"] == str(folder)


def test_resources_build_their_client_from_their_config_and_close_it_after(tmp_path) -> None:
    config = tmp_path / "tally.yaml"
    config.write_text(f"database: duckdb://{tmp_path / 'tally.duckdb'}\n")
    store = TallyStore(config_path=str(config))
    apart = Ledger(config_path=str(config), ledger_database=f"duckdb://{tmp_path / 'ledger.duckdb'}")
    with dg.build_resources({"store": store, "ledger": apart}) as built:
        client = built.store._runtime
        assert client is not None and client._store is not None  # built and opened when set up
        assert built.store.event_count() == 0 and built.store.config.database.endswith("tally.duckdb")
        assert built.ledger.config.database.endswith("ledger.duckdb")
        config.write_text(f"database: duckdb://{tmp_path / 'tally.duckdb'}\nalerts: {{events_silent_after: 60}}\n")
        assert built.store.config.alerts.events_silent_after == 3600  # one execution, one config
    assert client._store is None  # closed with the execution
    with dg.build_resources({"store": store}) as again:
        assert again.store._runtime is not client  # the next execution builds its own, from the file as it is now
        assert again.store.config.alerts.events_silent_after == 60
    assert store._runtime is None  # the definition itself holds no client


def test_production_resources_read_the_environment_where_they_run(monkeypatch) -> None:
    from tally_pipeline.orchestration.resources import environment_resources

    monkeypatch.setenv("TALLY_CONFIG", "/etc/tally/tally.yaml")
    monkeypatch.delenv("TALLY_DATABASE", raising=False)
    resources = environment_resources()
    for key in ("store", "ledger", "adapters"):
        assert resources[key].config_path == dg.EnvVar("TALLY_CONFIG") and isinstance(resources[key].config_path, dg.EnvVar)
    assert resources["store"].database is None  # unset: the config file's database, not a failing EnvVar
    monkeypatch.setenv("TALLY_DATABASE", "postgresql://tally@db/tally")
    assert isinstance(environment_resources()["ledger"].database, dg.EnvVar)


def test_a_landing_run_records_and_folds_its_writes_and_automation_adds_no_run(setup) -> None:
    defs, landing, instance = setup["defs"], setup["landing"], setup["instance"]
    cursor = None
    for _ in range(3):  # a new deployment: automation fills in the never-materialized assets, then settles
        _, cursor = automation_tick(defs, instance, cursor)
    (landing / "2026-03-01").mkdir()
    (landing / "2026-03-01" / "a.jsonl").write_text(
        json.dumps(vol_event("l1", "v-land", "create", T0 + timedelta(hours=1))) + "\n{\"not\": \"an event\"}\n")
    ingested = defs.resolve_job_def("landing_files").execute_in_process(instance=instance, partition_key="2026-03-01")
    assert ingested.success
    # the landing run records what it wrote into the ingest tables, as itself
    assert materializations(ingested, "event_log")[0]["written_by"] == "landing_files (2026-03-01)"
    assert materializations(ingested, "dead_letter")[0]["dagster/row_count"] == 1
    # the API is not credited with it
    looked = api_writes_look(defs, instance)
    assert not {e.asset_key.to_user_string() for e in looked.asset_events or []} & {"event_log", "dead_letter"}
    # the landing run folded what it wrote, and says so on the projections (after event_log, as a sync does)
    for key in ("current_resources", "resource_intervals", "projection_state"):
        [meta] = materializations(ingested, key)
        assert meta["refreshed_by"] == "landing_files (2026-03-01)"
    assert materializations(ingested, "current_resources")[0]["live"] == 1
    # so automation launches no projection run for it, nor a run of the ingest tables to record nothing new
    requested, _ = automation_tick(defs, instance, cursor)
    assert requested == []


def snapshot_tick(defs, instance) -> dg.AssetCheckEvaluation:
    """One tick of analyst_snapshot_sensor, recorded as the daemon records it."""
    with dg.build_sensor_context(instance=instance, repository_def=defs.get_repository_def(),
                                 resources={"store": defs.resources["store"]}) as context:
        result = defs.resolve_sensor_def("analyst_snapshot_sensor").evaluate_tick(context)
    [evaluation] = result.asset_events
    instance.report_runless_asset_event(evaluation)
    assert result.skip_message.startswith("evaluated 1 check (analyst_snapshot_current)")
    return evaluation


def test_every_writing_run_refreshes_the_whole_snapshot_and_a_stale_one_is_red(setup, store_url) -> None:
    import polars as pl

    from tally_pipeline.orchestration.catalog import TABLES
    from tally_pipeline.store.snapshot import SNAPSHOT_TABLES

    assert set(TABLES.values()) <= set(SNAPSHOT_TABLES)  # every asset table the catalog lists
    defs, rt, landing, instance = setup["defs"], setup["rt"], setup["landing"], setup["instance"]
    if not store_url.startswith("duckdb"):  # Postgres: analysts read the tables; there is nothing to keep current
        evaluation = snapshot_tick(defs, instance)
        assert evaluation.passed and evaluation.metadata["state"].value == "off"
        return
    folder = Path(store_url.removeprefix("duckdb://")).parent / "snapshot"
    # A landing run: the snapshot holds its events, and every materialization it reports says where and when.
    (landing / "2026-03-01").mkdir()
    (landing / "2026-03-01" / "batch.jsonl").write_text(
        "\n".join(json.dumps(vol_event(f"l{i}", f"v{i}", "create", T0)) for i in range(2)) + "\n")
    landed = defs.resolve_job_def("landing_files").execute_in_process(partition_key="2026-03-01", instance=instance)
    assert landed.success
    for key in ("raw_event_batches", "event_log", "cloud_activity"):
        [meta] = materializations(landed, key)
        assert meta["analyst_snapshot"] == str(folder) and meta["analyst_snapshot_written_at"] > 0
    assert {p.name for p in folder.iterdir()} == {f"{t}.parquet" for t in SNAPSHOT_TABLES} | {"_snapshot.json"}
    assert pl.read_parquet(folder / "events.parquet").height == 2
    assert pl.read_parquet(folder / "cloud_activity.parquet").height == 1
    assert snapshot_tick(defs, instance).passed
    # An API write, recorded by api_writes_sensor, is not in the snapshot: red, naming what it lacks.
    Ingestor(rt.store, rt.registry).ingest([vol_event("a1", "v9", "create", T0)], origin="api")
    api_writes_tick(defs, instance, launch=False)
    stale = snapshot_tick(defs, instance)
    assert not stale.passed and stale.severity == dg.AssetCheckSeverity.ERROR
    assert "event_log" in stale.metadata["behind"].value and "is older than" in stale.description
    # A sync writes it again (sync_runs, the projection it re-folded, its events): green again.
    setup["view"].records_by_type["volume"] = [volume("v0"), volume("v1"), volume("v9"), volume("v5")]
    synced = defs.resolve_job_def("reconciliation").execute_in_process(partition_key="c1", instance=instance)
    assert synced.success
    for key in ("sync_runs", "event_log", "current_resources", "projection_state"):
        assert materializations(synced, key)[-1]["analyst_snapshot"] == str(folder)
    assert pl.read_parquet(folder / "sync_runs.parquet").height == 1
    assert pl.read_parquet(folder / "projection_state.parquet").height >= 1
    assert snapshot_tick(defs, instance).passed
    # A posting cycle: the ledger's tables, cycles and skips included.
    posted = defs.resolve_job_def("delta_posting").execute_in_process(
        instance=instance, tags={"tally/now": (T0 + timedelta(days=1)).isoformat()})
    assert posted.success
    assert pl.read_parquet(folder / "ledger_cycles.parquet").height == 1
    assert pl.read_parquet(folder / "ledger_postings.parquet").height == 1
    for key in ("ledger_postings", "ledger_cycles", "ledger_skips", "usage_checkpoints"):
        assert materializations(posted, key)[0]["analyst_snapshot"] == str(folder)
    assert snapshot_tick(defs, instance).passed
    assert not [p for p in folder.iterdir() if p.name.endswith(".partial")]  # each file replaced whole


def test_runs_wait_for_the_database_pool_in_the_queue_and_every_step_opening_it_is_in_it(setup, tmp_path) -> None:
    """The shipped instance holds a run that needs the tally_db pool in the queue (granularity run: the UI's
    queue criteria name the pool) and every asset step that opens the database is in that pool."""

    from dagster._core.instance.config import PoolGranularity

    for shipped, limit in (("embedded", 1), ("dagster", 4)):
        home = tmp_path / shipped
        home.mkdir()
        text = (Path(__file__).resolve().parents[2] / "deploy" / shipped / "dagster.yaml").read_text()
        if shipped == "dagster":  # its storage is Postgres from the environment: keep only its concurrency block
            text = "concurrency:" + text.split("\nconcurrency:", 1)[1].split("\n\n", 1)[0] + "\n"
        (home / "dagster.yaml").write_text(text)
        with dg.DagsterInstance.from_config(str(home)) as instance:
            pools = instance.get_concurrency_config().pool_config
        assert (pools.pool_granularity, pools.default_pool_limit) == (PoolGranularity.RUN, limit)
    opening = {"store", "ledger"}
    for asset in setup["defs"].assets:
        if isinstance(asset, dg.AssetsDefinition) and asset.required_resource_keys & opening:
            for spec in asset.specs:
                assert asset.op.pool == "tally_db", spec.key
