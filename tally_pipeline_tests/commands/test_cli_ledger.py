"""The ledger commands end to end, and the naive poster the benchmark compares against."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tally_pipeline.bench.naive_poster import post_usage_naively
from tally_pipeline.cli import main
from tally_pipeline.core.ledger import EntityKey
from tally_pipeline.services.ledger.poster import post_usage
from tally_pipeline.store import open_store
from tally_pipeline_tests.ledger_data import DAY, T0, Row, insert, postings, vm


@pytest.fixture
def config(tmp_path, store_url):
    """A config file with the ledger settings, over a migrated store holding two servers."""
    store = open_store(store_url, migrate=True)
    insert(store, Row("p1", "vm-1", T0 - DAY, None, vm(vcpus=2)), Row("p2", "vm-2", T0 - 40 * DAY, T0 - 30 * DAY, vm()))
    store.close()
    path = tmp_path / "tally.yaml"
    path.write_text(f"database: {store_url}\nledger: {{ingest_lag: 3600, window_days: 35}}\n")
    return str(path)


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_post_usage_verify_and_daily_from_the_command_line(config) -> None:
    posted = run("post-usage", "--config", config, "--now", "2026-03-01T00:00:00Z")
    assert posted.exit_code == 0, posted.output
    out = json.loads(posted.output)
    assert out["clamp"] == "2026-02-28T23:00:00Z"  # the config's one-hour lag
    assert out["posted"] == 6 and out["skipped"] == []
    assert out["totals"]["usage"]["vcpu_hours"] == "286.000000"  # vm-1: 2 vCPUs × 23 h; vm-2: 2 × 5 days in the window
    assert out["totals"]["aged_out"]["vcpu_hours"] == "240.000000"  # vm-2: 2 × 5 days before the window

    again = json.loads(run("post-usage", "--config", config, "--now", "2026-03-01T00:00:00Z").output)
    assert again["posted"] == 0 and again["already_posted"] == 6

    verified = run("ledger", "verify", "--config", config)
    assert verified.exit_code == 0 and json.loads(verified.output)["ok"] is True

    daily = run("usage", "daily", "--config", config, "--day", "2026-02-28", "--through", "2026-03-01T00:00:00Z")
    assert daily.exit_code == 0, daily.output
    assert json.loads(daily.output)["rows"] == 3

    earlier = run("post-usage", "--config", config, "--now", "2026-02-28T00:00:00Z")
    assert earlier.exit_code == 1 and "never moves backwards" in earlier.output


def test_verify_exits_non_zero_on_a_discrepancy(config, store_url) -> None:
    assert run("post-usage", "--config", config, "--now", "2026-03-01T00:00:00Z").exit_code == 0
    store = open_store(store_url)
    store.run(lambda uow: uow.execute("UPDATE ledger_postings SET amount = amount * 2 WHERE project_id = 'p1'"))
    store.close()
    verified = run("ledger", "verify", "--config", config, "--ledger-only")
    assert verified.exit_code == 1
    assert {d["kind"] for d in json.loads(verified.output)["discrepancies"]} == {"ledger_mismatch"}


def test_post_usage_exits_non_zero_when_an_interval_is_excluded(config, store_url) -> None:
    store = open_store(store_url)
    insert(store, Row("p3", "vm-3", T0 - DAY, None, vm(vcpus="four")))
    store.close()
    result = run("post-usage", "--config", config, "--now", "2026-03-01T00:00:00Z")
    assert result.exit_code == 1
    out = json.loads(result.output)
    assert out["skipped"] == []
    assert [(s["project_id"], s["meter"], s["excluded_intervals"]) for s in out["excluded"]] == [("p3", "vcpu_hours", 1)]
    # the rest of p3 is billed: its instance hours do not depend on the size
    assert out["posted"] == 8
    verified = run("ledger", "verify", "--config", config)
    assert verified.exit_code == 1
    found = json.loads(verified.output)["discrepancies"]
    assert {(d["project_id"], d["meter"], d["kind"]) for d in found} == {
        ("p3", "vcpu_hours", "unreadable_usage"), ("p3", "vcpu_hours", "skipped")}
    assert any("bad_size: instance/vm-3: vcpus" in d["detail"] for d in found)


def test_verify_names_an_entity_with_usage_that_no_cycle_posted(config, store_url) -> None:
    assert run("post-usage", "--config", config, "--now", "2026-03-01T00:00:00Z").exit_code == 0
    store = open_store(store_url)
    # a checkpoint row that never advanced (a cycle skipped it), for usage dated before the clamp
    store.run(lambda uow: uow.execute(
        "UPDATE usage_checkpoints SET clamp = NULL, total = 0 WHERE project_id = 'p1' AND meter = 'vcpu_hours'"))
    store.run(lambda uow: uow.execute("DELETE FROM ledger_postings WHERE project_id = 'p1' AND meter = 'vcpu_hours'"))
    store.close()
    verified = run("ledger", "verify", "--config", config)
    assert verified.exit_code == 1
    assert [(d["project_id"], d["meter"], d["kind"]) for d in json.loads(verified.output)["discrepancies"]] == [
        ("p1", "vcpu_hours", "never_posted")]


def test_post_usage_refuses_an_instant_in_the_future(config) -> None:
    from datetime import UTC, datetime, timedelta

    from tally_pipeline.core.timeutil import format_rfc3339

    ahead = format_rfc3339(datetime.now(UTC) + timedelta(hours=1))
    result = CliRunner().invoke(main, ["post-usage", "--config", config, "--now", ahead])
    assert result.exit_code == 2
    assert "is in the future" in result.output and "--now" in result.output
    # within the tolerance (clock skew) it runs
    near = format_rfc3339(datetime.now(UTC) + timedelta(seconds=30))
    assert run("post-usage", "--config", config, "--now", near).exit_code == 0


def test_daily_wants_a_day_or_a_range(config) -> None:
    assert run("usage", "daily", "--config", config).exit_code == 2
    assert run("usage", "daily", "--config", config, "--day", "2026-03-01", "--from", "2026-03-01").exit_code == 2


@pytest.mark.slow
def test_bench_post_prints_the_figures(store_url) -> None:
    result = run("bench", "post", "--database", store_url, "--entities", "30", "--naive-sample", "6")
    assert result.exit_code == 0, result.output
    figures = json.loads(result.output)
    assert figures["entities"] == 30 and figures["entities_with_delta"] == 30 and figures["naive_sample"] == 6
    assert figures["naive_entities_with_delta"] == 6 and figures["verify_ok"] is True
    assert {"entities_per_s", "naive_entities_per_s", "speedup"} <= set(figures)
    # The write floor wrote what the steady cycle wrote: its 30 postings and every one of the 30 checkpoints.
    floor = figures["floor"]
    assert floor["postings"] == figures["postings"] == 30 and floor["checkpoints"] == 30
    assert figures["floor_s"] == pytest.approx(floor["postings_s"] + floor["checkpoints_s"], abs=0.002)
    # seconds and floor_s are printed to the millisecond: the ratio lies within what their rounding allows
    seconds, floor_s = figures["seconds"], figures["floor_s"]
    assert (seconds - 5e-4) / (floor_s + 5e-4) <= figures["ratio_to_floor"] <= (seconds + 5e-4) / max(floor_s - 5e-4, 1e-9)
    # three steady cycles by default, each with its own floor; the headline is the fastest, against its own
    cycles = figures["steady_cycles"]
    assert len(cycles) == 3 and all(c["seconds"] > 0 and c["floor_s"] > 0 for c in cycles)
    # (printed to the millisecond, two cycles can tie: the headline is one of the fastest, with its own floor)
    assert seconds == min(c["seconds"] for c in cycles)
    assert {"seconds": seconds, "floor_s": floor_s, "ratio_to_floor": figures["ratio_to_floor"]} in cycles
    if store_url.startswith("postgresql"):  # the benchmark's schema is gone
        store = open_store(store_url)
        assert store.query("SELECT count(*) FROM information_schema.schemata WHERE schema_name LIKE 'tally_bench_%'") == [(0,)]
        store.close()


@pytest.mark.slow
def test_bench_post_times_as_many_steady_cycles_as_asked(store_url) -> None:
    result = run("bench", "post", "--database", store_url, "--entities", "9", "--naive-sample", "3", "--steady-cycles", "1")
    assert result.exit_code == 0, result.output
    figures = json.loads(result.output)
    [only] = figures["steady_cycles"]
    assert only["seconds"] == figures["seconds"] and figures["entities_with_delta"] == 9 and figures["verify_ok"] is True
    assert run("bench", "post", "--database", store_url, "--steady-cycles", "0").exit_code == 2


@pytest.mark.slow
def test_the_naive_poster_posts_exactly_what_the_set_based_one_does(registry) -> None:
    rows = [Row(f"p{n}", f"vm-{n}", T0 - (n + 1) * DAY * 9, None if n % 2 else T0 - DAY, vm(vcpus=n)) for n in range(8)]
    stores = [open_store("duckdb://:memory:") for _ in range(2)]
    for store in stores:
        insert(store, *rows)
    post_usage(stores[0], registry, now=T0, ingest_lag=900, window_days=35, batch_size=5)
    keys = sorted(EntityKey("c1", f"p{n}", m.name) for n in range(8) for m in registry["instance"].meters)
    post_usage_naively(stores[1], registry, keys, now=T0, ingest_lag=900, window_days=35)
    assert postings(stores[0]) == postings(stores[1]) and len(postings(stores[0])) > 8
