"""`tally demo` end to end at a small size: the figures make the product's point, and are reproducible."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tally_pipeline.store import open_store


def demo(tmp_path: Path, name: str, *args: str) -> dict:
    directory = tmp_path / name
    result = subprocess.run(
        [sys.executable, "-m", "tally_pipeline", "demo", "--json", "--dir", str(directory), *args],
        capture_output=True, text=True, timeout=600, env={**os.environ, "TALLY_CONFIG": ""},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    # Quiet: no Dagster log on the terminal (it is in dagster.log), no warnings.
    assert "DEBUG" not in result.stderr and "Warning" not in result.stderr, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert "RUN_SUCCESS" in Path(report["dagster_log"]).read_text()
    assert Path(report["database"]).is_file() and Path(report["picture"]).stat().st_size > 10_000
    return report


def figures(report: dict) -> dict:
    """What must not change between two runs with the same seed (paths and timings aside)."""
    return {k: v for k, v in report.items()
            if k not in ("database", "events_only_database", "picture", "dagster_log", "snapshot", "seconds")}


@pytest.fixture(scope="module")
def lossy(tmp_path_factory) -> tuple[dict, dict]:
    tmp = tmp_path_factory.mktemp("demo")
    args = ("--hours", "4", "--clouds", "2", "--loss", "0.05", "--duplicates", "0.01", "--seed", "3")
    return demo(tmp, "first", *args), demo(tmp, "second", *args)


@pytest.mark.slow
def test_lossy_demo_events_alone_are_wrong_and_reconciliation_stays_within_the_seed_bound(lossy) -> None:
    report, _ = lossy
    assert report["events"]["lost"] > 0 and report["events"]["duplicates"] > 0
    assert report["corrections"]["created"] + report["corrections"]["deleted"] > 0
    meters = report["meters"]
    assert set(meters) == {"instance_hours", "vcpu_hours", "ram_gb_hours", "volume_gb_hours", "floating_ip_hours",
                           "image_gb_hours", "load_balancer_hours"}
    worst_events_only = max(m["events_only_error"] for m in meters.values())
    assert worst_events_only > 0.02  # losing 5 % of events shows
    for name, m in meters.items():
        assert abs(m["ledger"] - m["truth"]) <= m["seed_bound"] + 1e-6, name
        assert m["reconciled_error"] <= m["events_only_error"] or m["reconciled_error"] == 0, name
    assert report["postings"]["usage"] > 0
    assert report["syncs"]["dagster_runs"]["scheduled sync (all clouds)"] == 4 * 6 + 2


@pytest.mark.slow
def test_lossy_demo_reports_the_error_a_tenant_sees(lossy) -> None:
    report, _ = lossy
    tenant = report["tenant"]
    plain, fixed = tenant["abs_error"]["events_only"], tenant["abs_error"]["reconciled"]
    assert plain > 0.01 and fixed < plain
    # per tenant nothing nets out: the summed absolute error is at least any meter's netted error
    meters = report["meters"]
    truth_total = sum(m["truth"] for m in meters.values())
    netted = abs(sum(m["events_only"] - m["truth"] for m in meters.values())) / truth_total
    assert plain >= netted
    worst = tenant["worst"]["events_only"]
    assert worst["meter"] in meters and worst["error"] >= plain
    assert worst["project_id"] and abs(worst["measured"] - worst["truth"]) > 0


@pytest.mark.slow
def test_same_seed_gives_the_same_figures(lossy) -> None:
    first, second = lossy
    assert figures(first) == figures(second)


@pytest.mark.slow
def test_without_loss_both_ledgers_are_exact(tmp_path) -> None:
    report = demo(tmp_path, "exact", "--hours", "3", "--clouds", "1", "--loss", "0", "--duplicates", "0", "--seed", "5")
    for name, m in report["meters"].items():
        assert m["events_only_error"] == 0 and m["reconciled_error"] == 0, name
        assert m["ledger"] == m["truth"] and m["events_only"] == m["truth"], name
    assert report["tenant"]["abs_error"] == {"events_only": 0.0, "reconciled": 0.0}
    assert report["tenant"]["worst"] == {"events_only": None, "reconciled": None}
    assert report["events"]["lost"] == 0
    # One analyst snapshot, written at the end: it holds the ledger as the demo left it.
    manifest = json.loads((Path(report["snapshot"]) / "_snapshot.json").read_text())
    with open_store(f"duckdb://{report['database']}") as store:
        posted = store.query("SELECT count(*) FROM ledger_postings")[0][0]
    assert posted > 0 and manifest["rows"]["ledger_postings"] == posted


@pytest.mark.slow
def test_verbose_prints_the_dagster_log(tmp_path) -> None:
    directory = tmp_path / "verbose"
    result = subprocess.run(
        [sys.executable, "-m", "tally_pipeline", "demo", "--hours", "1", "--clouds", "1", "--verbose", "--dir", str(directory)],
        capture_output=True, text=True, timeout=600, env={**os.environ, "TALLY_CONFIG": ""},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "RUN_START" in result.stderr and "RUN_START" in (directory / "dagster.log").read_text()
    assert "tally demo" in result.stdout


@pytest.mark.slow
def test_piped_the_demo_says_each_stage_as_it_happens(tmp_path) -> None:
    """stderr not a terminal: no bar (nothing until the end), but a line per stage and per tenth of the window."""
    result = subprocess.run(
        [sys.executable, "-m", "tally_pipeline", "demo", "--hours", "1", "--clouds", "1", "--dir", str(tmp_path / "d")],
        capture_output=True, text=True, timeout=600, env={**os.environ, "TALLY_CONFIG": ""},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stderr.splitlines()
    assert "\r" not in result.stderr and all(line.startswith("tally demo: ") for line in lines), lines
    stages = ["simulating 1 cloud(s)", "the baseline:", "the window: 6 simulated 10-minute ticks", "10% of the window",
              "100% of the window (6/6 ticks", "the end:", "drawing "]
    found = [next(i for i, line in enumerate(lines) if line.removeprefix("tally demo: ").startswith(s)) for s in stages]
    assert found == sorted(found), lines
    assert sum("% of the window" in line for line in lines) == 6  # one per tick here: 6 ticks, each a tenth or more


@pytest.mark.slow
def test_the_events_only_baseline_from_its_own_process_is_the_one_this_process_computes(tmp_path) -> None:
    from tally_pipeline.demo import DemoSettings, events_only, run_demo

    run = run_demo(DemoSettings(clouds=1, hours=2, loss=0.1, seed=4, directory=tmp_path / "demo"))
    assert run.baseline is not None and len(run.samples) == 3  # the baseline, two hours, the end
    here = events_only(run.settings, list(run.sim.clouds), run.directory / "tally.yaml", tmp_path / "here.duckdb")
    spawned = [run.baseline, *run.samples]
    assert [s.totals for s in here] == [s.events_only for s in spawned]
    assert [s.by_entity for s in here] == [s.tenants.events_only for s in spawned if s.tenants]
    assert any(s.events_only for s in run.samples) and run.samples[-1].events_only != run.samples[-1].reconciled


def _broken_baseline(*_: object) -> list:
    raise RuntimeError("the events-only store broke")


@pytest.mark.slow
def test_a_failing_baseline_process_fails_the_demo_with_its_error(tmp_path) -> None:
    from tally_pipeline.demo import DemoSettings, run_demo

    with pytest.raises(RuntimeError, match="the events-only store broke"):
        run_demo(DemoSettings(clouds=1, hours=1, directory=tmp_path), baseline_of=_broken_baseline)


def _dying_baseline(*_: object) -> list:
    os._exit(3)  # as if killed: no exception, no result, the process simply gone


@pytest.mark.slow
def test_a_baseline_process_that_dies_fails_the_demo_instead_of_hanging(tmp_path) -> None:
    from tally_pipeline.demo import DemoSettings, run_demo

    with pytest.raises(RuntimeError, match="the events-only baseline's process died before it returned"):
        run_demo(DemoSettings(clouds=1, hours=1, directory=tmp_path), baseline_of=_dying_baseline)
