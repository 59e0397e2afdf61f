"""Monthly statements on both stores: a month waits until it is closed (and says why), is stated from
the lifecycles, and late usage is re-stated as a new version with the difference; the statement agrees
with the ledger's postings and with SQL over ``usage_daily``."""

from __future__ import annotations

from datetime import date, datetime, timedelta
from decimal import Decimal

from tally_pipeline.core.statements import month_bounds
from tally_pipeline.services import projection
from tally_pipeline.services.ingest import Ingestor
from tally_pipeline.services.ledger.daily import recompute_usage_daily
from tally_pipeline.services.ledger.poster import post_usage
from tally_pipeline.services.statements import close_month, read_statement
from tally_pipeline.store import Store
from tally_pipeline_tests.services.test_projection import envelope

LAG = timedelta(seconds=900)
WINDOW_DAYS = 35
OCT, NOV = date(2026, 10, 1), date(2026, 11, 1)
NOV_START, NOV_END = month_bounds(NOV)
H = timedelta(hours=1)


def cycle(store: Store, registry, now: datetime) -> None:
    projection.refresh(store)
    result = post_usage(store, registry, now=now, ingest_lag=LAG, window_days=WINDOW_DAYS)
    assert result.clean, result.to_dict()


def latest(store: Store, cloud: str, month: date) -> dict[tuple[str, str], Decimal]:
    return {(s.line.project_id, s.line.meter): Decimal(s.line.micro) / 10**6
            for s in read_statement(store, cloud, month).lines}


def daily_sql(store: Store, cloud: str, month: date) -> dict[tuple[str, str], Decimal]:
    """The third reading: an analyst's SQL over usage_daily, summed over the month's days."""
    start, end = month_bounds(month)
    return {(p, m): Decimal(q) for p, m, q in store.query(
        "SELECT project_id, meter, sum(quantity) FROM usage_daily WHERE cloud = %s AND day >= %s AND day < %s "
        "GROUP BY project_id, meter HAVING sum(quantity) <> 0", [cloud, start.date(), end.date()])}


def test_a_month_waits_then_is_stated_and_late_usage_is_restated(store: Store, registry) -> None:
    ingestor = Ingestor(store, registry)
    ingestor.ingest([
        envelope("a1", "v1", "create", NOV_START - 12 * H, "p1", 10),  # open from October on
        envelope("b1", "v2", "create", NOV_START + 9 * 24 * H, "p2", 4),
        envelope("b2", "v2", "delete", NOV_START + 10 * 24 * H, None, None),
    ], origin="t")
    cycle(store, registry, NOV_END - H)

    # the month has not ended by the ingest lag
    early = close_month(store, registry, cloud="c1", month=NOV, now=NOV_END + LAG - timedelta(seconds=1), ingest_lag=LAG)
    assert early.status == "waiting"
    assert [w.split(":")[0] for w in early.waits] == ["month_open", "ledger_behind"]
    # ended, but the ledger is posted only through an hour before its end
    behind = close_month(store, registry, cloud="c1", month=NOV, now=NOV_END + LAG, ingest_lag=LAG)
    assert [w.split(":")[0] for w in behind.waits] == ["ledger_behind"]
    assert read_statement(store, "c1", NOV).record is None

    cycle(store, registry, NOV_END + LAG)  # clamp: the month's end
    stated = close_month(store, registry, cloud="c1", month=NOV, now=NOV_END + LAG, ingest_lag=LAG)
    assert stated.status == "stated" and stated.waits == [] and stated.lines == 2
    nov = {("p1", "volume_gb_hours"): Decimal(30 * 24 * 10), ("p2", "volume_gb_hours"): Decimal(24 * 4)}
    assert latest(store, "c1", NOV) == nov
    # stating again with nothing new changes nothing
    assert close_month(store, registry, cloud="c1", month=NOV, now=NOV_END + 2 * H, ingest_lag=LAG).status == "unchanged"

    # late usage for the closed month: a volume of p1 that lived on the 20th, reported on December 2nd
    ingestor.ingest([envelope("c1", "v3", "create", NOV_START + 19 * 24 * H, "p1", 2),
                     envelope("c2", "v3", "delete", NOV_START + 19 * 24 * H + 5 * H, None, None)], origin="t")
    late = close_month(store, registry, cloud="c1", month=NOV, now=NOV_END + 26 * H, ingest_lag=LAG)
    assert late.status == "waiting" and [w.split(":")[0] for w in late.waits] == ["ledger_unverified"]
    cycle(store, registry, NOV_END + 26 * H)  # the ledger posts the late usage at its next clamp
    restated = close_month(store, registry, cloud="c1", month=NOV, now=NOV_END + 26 * H, ingest_lag=LAG)
    assert restated.status == "restated" and [(n.project_id, n.version, n.micro, n.previous) for n in restated.new] == [
        ("p1", 2, 7210 * 10**6, 7200 * 10**6)]

    every = read_statement(store, "c1", NOV, versions=True)
    p1 = [s.line for s in every.lines if s.line.project_id == "p1"]
    assert [(x.version, x.micro, x.previous, x.difference) for x in p1] == [
        (1, 7200 * 10**6, None, 7200 * 10**6), (2, 7210 * 10**6, 7200 * 10**6, 10 * 10**6)]
    assert every.record is not None and every.record.restated_at == NOV_END + 26 * H and every.record.versions == 3
    nov[("p1", "volume_gb_hours")] = Decimal(7210)
    assert latest(store, "c1", NOV) == nov

    # the readings agree: the statement, SQL over usage_daily, and the ledger (posted through the clamp
    # of November's end, plus what the next clamp posted: October's 12 hours and the late volume)
    recompute_usage_daily(store, registry, OCT.replace(day=31), date(2026, 11, 30), through=NOV_END + 26 * H)
    assert daily_sql(store, "c1", NOV) == nov
    posted = {(p, m): Decimal(a) for p, m, a in store.query(
        "SELECT project_id, meter, sum(amount) FROM ledger_postings WHERE cloud = 'c1' AND clamp <= %s "
        "GROUP BY project_id, meter", [NOV_END])}
    assert posted == {("p1", "volume_gb_hours"): Decimal(120 + 7200), ("p2", "volume_gb_hours"): Decimal(96)}


def test_closing_runs_racing_on_one_month_write_each_version_once(store: Store, registry) -> None:
    from concurrent.futures import ThreadPoolExecutor
    from threading import Barrier

    Ingestor(store, registry).ingest([envelope("r1", "v1", "create", NOV_START + H, "p1", 1),
                                      envelope("r2", "v2", "create", NOV_START + H, "p2", 2)], origin="t")
    cycle(store, registry, NOV_END + LAG)
    start = Barrier(4)

    def close() -> str:
        start.wait(timeout=60)
        return close_month(store, registry, cloud="c1", month=NOV, now=NOV_END + LAG, ingest_lag=LAG).status

    with ThreadPoolExecutor(4) as pool:
        statuses = sorted(f.result(timeout=300) for f in [pool.submit(close) for _ in range(4)])
    assert statuses.count("stated") >= 1 and set(statuses) <= {"stated", "unchanged"}
    rows = store.query("SELECT project_id, version FROM usage_statements WHERE cloud = 'c1' ORDER BY 1, 2")
    assert rows == [("p1", 1), ("p2", 1)]
    [(versions,)] = store.query("SELECT versions FROM statement_months WHERE cloud = 'c1' AND month = '2026-11'")
    assert versions == 2


def test_usage_state_says_why_a_month_waits_and_refuses_a_bad_month(store: Store, store_url: str, registry) -> None:
    import json

    from click.testing import CliRunner

    from tally_pipeline.cli import main

    Ingestor(store, registry).ingest([envelope("w1", "v1", "create", NOV_START + H, "p1", 1)], origin="t")
    cycle(store, registry, NOV_END - H)  # the ledger stops before the month's end (clamp: an hour and the lag)
    waiting = CliRunner().invoke(main, ["usage", "state", "--database", store_url, "--month", "2026-11",
                                        "--now", "2026-12-01T06:00:00Z"], catch_exceptions=False)
    assert waiting.exit_code == 1
    [cloud] = json.loads(waiting.output)["clouds"]
    assert cloud["status"] == "waiting" and cloud["waits"][0].startswith("ledger_behind: the ledger is posted through "
                                                                           "2026-11-30T22:45:00Z")
    assert read_statement(store, "c1", NOV).record is None  # a waiting month writes nothing
    bad = CliRunner().invoke(main, ["usage", "show", "--database", store_url, "--cloud", "c1", "--project", "p1",
                                    "--month", "2026-13"])
    assert bad.exit_code == 2 and "month must be YYYY-MM, not '2026-13'" in bad.output


def sync_run(store: Store, run_id: str, poll: datetime, deferred: int = 0, status: str = "succeeded") -> None:
    from tally_pipeline.store.sync_runs import RUN_COLUMNS, write_run

    run = dict.fromkeys(RUN_COLUMNS, 0) | {
        "run_id": run_id, "cloud": "c1", "run_key": run_id, "tick": poll, "poll_time": poll, "started_at": poll,
        "finished_at": poll, "status": status, "per_type": None, "error": None, "drift": None,
        "first_load": False, "deleted_listing": None, "deleted_window_end": None}
    deferrals = [[run_id, "c1", "volume", f"v-{i}", "update", "in_transition", "creating", None, poll]
                 for i in range(deferred)]
    write_run(store, run, deferrals)


def test_a_month_waits_for_a_reconciliation_after_its_end_with_nothing_deferred(store: Store, registry) -> None:
    Ingestor(store, registry).ingest([envelope("s1", "v1", "create", NOV_START + H, "p1", 1)], origin="t")
    cycle(store, registry, NOV_END + LAG)

    def waits() -> list[str]:
        outcome = close_month(store, registry, cloud="c1", month=NOV, now=NOV_END + 2 * H, ingest_lag=LAG)
        return [w.split(":")[0] for w in outcome.waits]

    sync_run(store, "r1", NOV_END - H)  # the cloud is reconciled, but only before the month ended
    assert waits() == ["unreconciled"]
    sync_run(store, "r2", NOV_END + H, deferred=2)  # after it, but deferring two corrections
    assert waits() == ["deferred"]
    sync_run(store, "r3", NOV_END + 90 * timedelta(minutes=1), status="failed")  # a failed run reconciles nothing
    assert waits() == ["deferred"]
    sync_run(store, "r4", NOV_END + 2 * H - timedelta(minutes=1))  # a run that settled them
    assert waits() == []
    assert read_statement(store, "c1", NOV).record is not None
