"""The benchmark commands at toy sizes: each prints the JSON its issue names, and its figures agree
with what the run left in the database. (Speed is never asserted here; the figures are reported.)"""

from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner

from tally_pipeline.cli import main
from tally_pipeline.store import open_store


def _bench(*args: str) -> dict:
    result = CliRunner().invoke(main, ["bench", *args])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    # Every benchmark says how busy the machine was: the 1, 5 and 15 minute load before and after it ran.
    load = report["load_average"]
    assert len(load["before"]) == len(load["after"]) == 3 and load["cpus"] >= 1
    assert all(value >= 0 for value in (*load["before"], *load["after"]))
    return report


@pytest.mark.parametrize("store_url", ["duckdb", "postgres"], indirect=True)
def test_projection_bench_rebuilds_every_resource_and_refreshes_only_the_late_ones(store_url: str) -> None:
    with open_store(store_url, migrate=True):
        pass
    report = _bench("projection", "--database", store_url, "--events", "3000", "--resources", "300", "--late", "40")
    assert {"rebuild_s", "floor_s", "rebuild_vs_floor", "incremental_s", "incremental_vs_rebuild"} <= set(report)
    assert report["rebuild_resources"] == 300
    # 40 late events over 300 resources touch at most 40 of them, and at least one.
    assert 1 <= report["incremental_resources"] <= 40
    assert report["rebuild_s"] > 0 and report["floor_s"] > 0 and report["rebuild_vs_floor"] > 0
    assert report["rebuild_from_empty_s"] > 0 and report["rebuild_from_empty_vs_floor"] > 0
    assert 0 < report["incremental_lookup_floor_s"]
    with open_store(store_url) as store:
        assert store.event_count() == 3000 + 40
        assert store.query("SELECT count(*) FROM current_resources")[0][0] == 300
        watermark = store.query("SELECT watermark FROM projection_state WHERE name = 'resources'")[0][0]
        assert watermark == store.query("SELECT max(seq) FROM events")[0][0]


@pytest.mark.parametrize("store_url", ["duckdb", "postgres"], indirect=True)
def test_projection_growth_measures_each_log_size_in_one_run_and_fits_the_exponent(store_url: str) -> None:
    with open_store(store_url, migrate=True):
        pass
    report = _bench("projection", "--database", store_url, "--growth", "--size", "2000", "--size", "6000",
                    "--late", "30")
    steps = report["steps"]
    # Each step loads on top of the last, up to the step's size (the late events count towards the next).
    assert [s["log_events"] for s in steps] == [2000, 6000]
    # Ten events per resource: the second step's 3,970 new events are 397 new resources.
    assert [s["rebuild_resources"] for s in steps] == [200, 597]
    for s in steps:
        assert 1 <= s["incremental_resources"] <= 30
        assert s["incremental_resumed"] + s["incremental_refolded"] <= s["incremental_resources"]
        assert s["rebuild_peak_rss_mb"] > 0
    small, large = steps
    expected = math.log(large["incremental_s"] / small["incremental_s"]) / math.log(6000 / 2000)
    assert report["incremental_exponent"] == pytest.approx(expected, abs=0.01)
    assert report["log_growth"] == 3
    with open_store(store_url) as store:
        assert store.event_count() == 6030
        assert store.query("SELECT count(*) FROM current_resources")[0][0] == 597


def test_reconcile_bench_finds_exactly_the_drift_it_planted() -> None:
    report = _bench("reconcile", "--resources", "300", "--resources", "3000")
    small, large = report["runs"]
    assert (small["resources"], large["resources"]) == (300, 3000) and report["size_ratio"] == 10
    # 1 % drift: a third missing (deletes), a third new (creates), up to a third resized (updates).
    assert large["corrections"]["delete"] == large["corrections"]["create"] == 10
    assert 0 < large["corrections"]["update"] <= 10
    assert small["corrections"]["delete"] == small["corrections"]["create"] == 1
    assert report["diff_growth"] == pytest.approx(large["diff_s"] / max(small["diff_s"], 1e-9), rel=0.1)


@pytest.mark.slow
@pytest.mark.parametrize("store_url", ["duckdb", "postgres"], indirect=True)
def test_ingest_bench_measures_core_http_and_copy_on_a_preloaded_log(store_url: str) -> None:
    with open_store(store_url, migrate=True):
        pass
    report = _bench("ingest", "--database", store_url, "--events", "2000", "--preload", "5000", "--rounds", "2")
    for key in ("core_events_per_s", "http_events_per_s", "copy_events_per_s"):
        assert report[key] > 0
    # each phase ran twice, the second round starting one phase later; its figure is its total time
    assert [r["first"] for r in report["rounds"]] == ["copy", "core"]
    assert report["balanced"] is False  # two rounds: not every phase went first
    for phase in ("copy", "core", "http"):
        assert report[f"{phase}_s"] == pytest.approx(sum(r[f"{phase}_s"] for r in report["rounds"]), abs=2e-3)
        assert report[f"{phase}_fastest_s"] == min(r[f"{phase}_s"] for r in report["rounds"])
        # seconds are printed to three decimals: at this size that alone moves the rate by a percent or two
        rate = report[f"{phase}_events_per_s"]
        assert rate * report[f"{phase}_s"] == pytest.approx(2 * 2000, abs=rate * 6e-4 + 1)
    # the ratios are printed to three decimals: on a busy machine they can be small enough for that to matter
    assert report["core_vs_copy"] == pytest.approx(report["core_events_per_s"] / report["copy_events_per_s"],
                                                   rel=0.01, abs=6e-4)
    assert report["http_vs_copy"] == pytest.approx(report["http_events_per_s"] / report["copy_events_per_s"],
                                                   rel=0.01, abs=6e-4)
    assert report["log_before"] == 5000
    # The preload, then twice the COPY baseline, the core and the HTTP phases, each into events itself.
    assert report["log_after"]["rows"] == 5000 + 2 * 3 * 2000
    with open_store(store_url) as store:
        assert store.event_count() == 17000
        assert store.query("SELECT count(*) FROM rejected_events")[0][0] == 0
        # Random uuid ids and resources scattered over 4M: almost every event is its resource's only one.
        ids, resources, clouds = store.query(
            "SELECT count(DISTINCT event_id), count(DISTINCT resource_id), count(DISTINCT cloud) FROM events")[0]
        assert ids == 17000 and resources > 16000 and clouds == 3
        assert all(len(i) == 36 for (i,) in store.query("SELECT event_id FROM events"))
    if store_url.startswith("postgres"):
        sizes = report["log_after"]["index_bytes_per_event"]
        assert {"events_dedup_key", "events_by_resource"} <= set(sizes) and all(v > 0 for v in sizes.values())


@pytest.mark.parametrize("store_url", ["duckdb", "postgres"], indirect=True)
def test_dead_letter_bench_stores_every_refused_item_and_reports_each_tenth(store_url: str) -> None:
    report = _bench("dead-letter", "--database", store_url, "--rows", "20", "--item-kb", "3")
    assert report["rows"] == report["stored"] == 20
    assert report["raw_mb_stored"] * 2**20 >= 20 * 3 * 1024  # each item whole, with its envelope
    assert [step["rows_before"] for step in report["by_size"]] == list(range(0, 20, 2))
    assert all(0 < step["p50_s"] <= step["p99_s"] <= step["max_s"] for step in report["by_size"])
    with open_store(store_url) as store:
        assert store.query("SELECT count(*), min(reason), max(reason) FROM rejected_events") == \
            [(20, "size_schema", "size_schema")]


@pytest.mark.parametrize("store_url", ["duckdb", "postgres"], indirect=True)
def test_usage_api_bench_times_the_live_balance_and_its_figures_are_the_ledgers(store_url: str) -> None:
    from datetime import timedelta
    from decimal import Decimal

    from tally_pipeline.bench import usage_api

    report = _bench("usage-api", "--database", store_url, "--entities", "31", "--requests", "10")
    assert report["entities"] == 31 and report["tenant_resources"] == 1000
    for key in ("current_p99_ms", "current_service_p99_ms", "month_query_p99_ms", "month_page_p99_ms"):
        assert report[key] > 0
    # the tenant's 700 instances ran from 40 days before the month: posted through the second
    # cycle's clamp (both cycles are dated in the month), pending for the half hour since
    clamp = usage_api.FIRST_CYCLE + timedelta(hours=1) - timedelta(seconds=usage_api.LAG)
    hours = Decimal((clamp - (usage_api.MONTH - timedelta(days=40))) / timedelta(hours=1))
    balance = {(b["meter"], b["account"]): b for b in report["tenant_balance"]}
    instance = [balance[("instance_hours", account)] for account in ("usage", "aged_out")]
    assert sum(Decimal(b["posted"]) for b in instance) == 700 * hours
    assert sum(Decimal(b["pending"]) for b in instance) == Decimal(350)
    assert Decimal(balance[("instance_hours", "aged_out")]["posted"]) > 0  # the days before the window
