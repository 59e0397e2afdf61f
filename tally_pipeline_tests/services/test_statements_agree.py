"""The three readings of a month agree on both stores: the API (``GET /v1/statements``, ``GET /v1/usage``),
the statement (its table, and ``tally usage show``), and SQL over the ledger; also under random late
events and re-statements (a property test)."""

from __future__ import annotations

import csv
import io
import json
from collections import defaultdict
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from tally_pipeline.api.app import ApiContext, create_app
from tally_pipeline.api.auth import Principal, TokenBook, digest
from tally_pipeline.cli import main
from tally_pipeline.core.statements import month_bounds
from tally_pipeline.core.usage import Interval, cumulative_usage_micro
from tally_pipeline.services import projection
from tally_pipeline.services.ingest import Ingestor
from tally_pipeline.services.ledger.daily import recompute_usage_daily
from tally_pipeline.services.ledger.poster import post_usage
from tally_pipeline.services.statements import close_month, read_statement
from tally_pipeline.store import Store
from tally_pipeline_tests.api.openapi_spec import check_answer
from tally_pipeline_tests.services.ledger.test_pending import fresh_store
from tally_pipeline_tests.services.test_projection import envelope

LAG = timedelta(seconds=900)
WINDOW_DAYS = 35
OCT, NOV, DEC = date(2026, 10, 1), date(2026, 11, 1), date(2026, 12, 1)
H = timedelta(hours=1)
READ_ALL, READ_C2 = "statement-read-all-00000", "statement-read-c2-000000"


def cycle(store: Store, registry, now: datetime) -> None:
    projection.refresh(store)
    result = post_usage(store, registry, now=now, ingest_lag=LAG, window_days=WINDOW_DAYS)
    assert result.clean, result.to_dict()


def close(store: Store, registry, cloud: str, month: date, now: datetime) -> str:
    return close_month(store, registry, cloud=cloud, month=month, now=now, ingest_lag=LAG).status


def stated(store: Store, cloud: str, month: date) -> dict[tuple[str, str], Decimal]:
    """The statement: each entity's latest version, from the service over its table."""
    return {(s.line.project_id, s.line.meter): Decimal(s.line.micro).scaleb(-6)
            for s in read_statement(store, cloud, month).lines}


def usage_daily_sql(store: Store, cloud: str, month: date) -> dict[tuple[str, str], Decimal]:
    """SQL over the ledger's daily usage: the month's days summed (nothing of the statement's code)."""
    start, end = month_bounds(month)
    return {(p, m): Decimal(q) for p, m, q in store.query(
        "SELECT project_id, meter, sum(quantity) FROM usage_daily WHERE cloud = %s AND day >= %s AND day < %s "
        "GROUP BY project_id, meter HAVING sum(quantity) <> 0", [cloud, start.date(), end.date()])}


def postings_sql(store: Store, cloud: str, through: datetime) -> dict[tuple[str, str], Decimal]:
    """SQL over the ledger's postings: every account, posted at clamps up to ``through``."""
    return {(p, m): Decimal(a) for p, m, a in store.query(
        "SELECT project_id, meter, sum(amount) FROM ledger_postings WHERE cloud = %s AND clamp <= %s "
        "GROUP BY project_id, meter HAVING sum(amount) <> 0", [cloud, through])}


def api_statement(client: TestClient, cloud: str, month: date, token: str = READ_ALL, **params) -> dict:
    response = client.get(f"/v1/statements/{cloud}/{month:%Y-%m}", params=params,
                          headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200, response.text
    check_answer("GET", "/v1/statements/{cloud}/{month}", response)
    return response.json()


def lines_of(document: dict) -> dict[tuple[str, str], Decimal]:
    return {(x["project_id"], x["meter"]): Decimal(x["quantity"]) for x in document["statements"]}


def test_api_statement_cli_and_sql_agree_through_a_restatement(store: Store, store_url: str, registry) -> None:
    book = TokenBook([(digest(READ_ALL), Principal(READ_ALL, frozenset({"read"}))),
                      (digest(READ_C2), Principal(READ_C2, frozenset({"read:c2"})))])
    clock_now = [datetime(2026, 12, 1, tzinfo=UTC)]
    ctx = ApiContext(store=store, ingestor=Ingestor(store, registry), tokens=book, clock=lambda: clock_now[0])
    client = TestClient(create_app(ctx))
    nov_start, nov_end = month_bounds(NOV)
    ctx.ingestor.ingest([
        envelope("a1", "v1", "create", nov_start - 6 * H, "p1", 10),
        envelope("a2", "v2", "create", nov_start + 24 * H, "p2", 3),
        envelope("a3", "v2", "delete", nov_start + 48 * H, None, None),
        envelope("a4", "w1", "create", nov_start + 5 * 24 * H, "p1", 7, cloud="c2"),
    ], origin="t")
    cycle(store, registry, nov_end + LAG)  # clamp: November's end

    # nothing stated yet: the API says so
    before = api_statement(client, "c1", NOV)
    assert before["stated"] is False and before["statements"] == []

    # tally usage state closes the month in every cloud with usage, as the Dagster asset does
    cli = CliRunner()
    out = cli.invoke(main, ["usage", "state", "--database", store_url, "--month", "2026-11",
                            "--now", "2026-12-01T01:00:00Z"], catch_exceptions=False)
    assert out.exit_code == 0, out.output
    assert [(c["cloud"], c["status"]) for c in json.loads(out.output)["clouds"]] == [("c1", "stated"), ("c2", "stated")]

    # late usage for the closed month, then the next cycle and a re-statement
    ctx.ingestor.ingest([envelope("b1", "v3", "create", nov_start + 10 * 24 * H, "p2", 5),
                         envelope("b2", "v3", "delete", nov_start + 10 * 24 * H + 3 * H, None, None)], origin="t")
    assert close(store, registry, "c1", NOV, nov_end + 2 * H) == "waiting"  # history changed under the ledger
    cycle(store, registry, nov_end + 2 * H + LAG)
    assert close(store, registry, "c1", NOV, nov_end + 2 * H + LAG) == "restated"

    expected = {("p1", "volume_gb_hours"): Decimal(30 * 24 * 10), ("p2", "volume_gb_hours"): Decimal(24 * 3 + 3 * 5)}
    # 1. the statement (its table through the service)
    assert stated(store, "c1", NOV) == expected
    # 2. the API, JSON and CSV
    document = api_statement(client, "c1", NOV)
    assert document["stated"] is True and document["restated_at"] is not None and lines_of(document) == expected
    csv_answer = client.get("/v1/statements/c1/2026-11", headers={"Authorization": f"Bearer {READ_ALL}",
                                                                  "Accept": "text/csv"})
    assert csv_answer.status_code == 200 and csv_answer.headers["Tally-Stated"] == "true"
    assert {(r["project_id"], r["meter"]): Decimal(r["quantity"])
            for r in csv.DictReader(io.StringIO(csv_answer.text))} == expected
    every = api_statement(client, "c1", NOV, versions="all", project_id="p2")
    assert [(x["version"], x["quantity"], x["previous_quantity"], x["difference"]) for x in every["statements"]] == [
        (1, "72.000000", None, "72.000000"), (2, "87.000000", "72.000000", "15.000000")]
    # 3. SQL over the ledger: usage_daily's days of the month, and the postings through the month's end
    # plus the re-stated difference, posted at the next clamp
    recompute_usage_daily(store, registry, date(2026, 10, 31), date(2026, 11, 30), through=nov_end + 3 * H)
    assert usage_daily_sql(store, "c1", NOV) == expected
    posted = postings_sql(store, "c1", nov_end)
    assert posted[("p1", "volume_gb_hours")] == expected[("p1", "volume_gb_hours")] + 6 * 10  # October's 6 hours
    assert posted[("p2", "volume_gb_hours")] + Decimal(15) == expected[("p2", "volume_gb_hours")]
    # reader scoping: a read:c2 token reads c2's statement, not c1's
    assert lines_of(api_statement(client, "c2", NOV, token=READ_C2)) == {("p1", "volume_gb_hours"): Decimal(25 * 24 * 7)}
    assert client.get("/v1/statements/c1/2026-11", headers={"Authorization": f"Bearer {READ_C2}"}).status_code == 403

    # /metrics: how far each cloud is stated, and its re-statements (c1, c2 unconfigured here: "other")
    samples = {(x.name, x.labels.get("cloud")): x.value for family in text_string_to_metric_families(
        client.get("/metrics").text) for x in family.samples}
    assert samples[("tally_statement_last_month_timestamp_seconds", "other")] == nov_start.timestamp()
    assert samples[("tally_statement_restated_lines_total", "other")] == 1

    # the command line shows the same numbers as the API: the statement, and the ledger's month
    clock_now[0] = nov_end + 3 * H
    shown = cli.invoke(main, ["usage", "show", "--database", store_url, "--cloud", "c1", "--project", "p2",
                              "--month", "2026-11", "--now", "2026-12-01T03:00:00Z"], catch_exceptions=False)
    assert shown.exit_code == 0, shown.output
    shown_doc = json.loads(shown.output)
    assert shown_doc["statement"] == api_statement(client, "c1", NOV, project_id="p2")
    usage = client.get("/v1/usage", params={"cloud": "c1", "project_id": "p2", "group": "month", "include": "pending",
                                            "from": "2026-11-01T00:00:00Z", "to": "2026-12-01T00:00:00Z"},
                       headers={"Authorization": f"Bearer {READ_ALL}"}).json()
    assert [(r["meter"], r["account"], r["quantity"], r["provisional"]) for r in shown_doc["ledger"]["usage"]] == [
        (r["meter"], r["account"], r["quantity"], r["provisional"]) for r in usage["usage"]]
    assert shown_doc["ledger"]["as_of"] == usage["as_of"].replace("+00:00", "Z")


# --- a property test: random late events and re-statements ---------------------------------------------------

SEP = date(2026, 9, 1)
MONTHS = (SEP, OCT, NOV, DEC)
SEP_START = month_bounds(SEP)[0]
JAN_START = month_bounds(DEC)[1]

volume = st.tuples(
    st.sampled_from(["p1", "p2"]),
    st.integers(0, 24 * 121),  # start hour from September 1st (through the end of December)
    st.one_of(st.none(), st.integers(1, 24 * 40)),  # hours it lives (None: still live)
    st.integers(1, 9),  # GiB
    st.integers(0, len(MONTHS)),  # ingested before the cycle at the end of MONTHS[i] (len: after them all)
)


def history(volumes: list[tuple]) -> list[tuple[int, list[dict], Interval, tuple[str, str, str]]]:
    out = []
    for i, (project, start_h, life_h, gb, arrives) in enumerate(volumes):
        start = SEP_START + start_h * H
        end = None if life_h is None else start + life_h * H
        events = [envelope(f"c{i}", f"vol-{i}", "create", start, project, gb)]
        if end is not None:
            events.append(envelope(f"d{i}", f"vol-{i}", "delete", end, None, None))
        out.append((arrives, events, Interval(start, end, {"gb": gb}, f"vol-{i}"), ("c1", project, "volume_gb_hours")))
    return out


@pytest.mark.parametrize("backend", ["duckdb", "postgres"])
def test_statements_follow_random_late_events_and_agree_with_the_ledger(backend: str, request, registry) -> None:
    meter = next(m for m in registry.meters() if m.name == "volume_gb_hours")

    @given(volumes=st.lists(volume, min_size=1, max_size=6))
    # always: a live volume known from the start, one of October reported only in January (October is
    # re-stated), and one of November's that arrives a month late
    @example(volumes=[("p2", 0, None, 2, 0), ("p2", 24 * 35, 24, 5, 4), ("p2", 24 * 65, 30, 3, 3)])
    @settings(max_examples=10, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    def holds(volumes) -> None:
        with fresh_store(backend, request) as store:
            run_history(store, volumes)

    restated: list[int] = []

    def run_history(store: Store, volumes: list[tuple]) -> None:
        ingestor = Ingestor(store, registry)
        plan = history(volumes)
        kept: dict[tuple, list[int]] = defaultdict(list)  # (entity, month) -> the amounts stated, in order
        for step in range(len(MONTHS) + 1):
            # what arrives before this step's cycle; after the last month's, everything left, late
            ingestor.ingest([e for arrives, events, *_ in plan if arrives == step for e in events], origin="t")
            end = month_bounds(MONTHS[step])[1] if step < len(MONTHS) else JAN_START + 5 * 24 * H
            cycle(store, registry, end + LAG)  # clamp: exactly this month's end
            arrived = [(interval, key) for arrives, _, interval, key in plan if arrives <= step]
            summed: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
            for month in MONTHS[:step + 1]:
                outcome = close_month(store, registry, cloud="c1", month=month, now=end + LAG, ingest_lag=LAG)
                assert outcome.status in ("stated", "restated", "unchanged"), outcome.waits
                # the statement holds what the history known by now used in that month, to the micro-unit
                start_m, end_m = month_bounds(month)
                truth: dict[tuple, int] = defaultdict(int)
                for interval, key in arrived:
                    truth[key] += (cumulative_usage_micro(meter, [interval], end_m)
                                   - cumulative_usage_micro(meter, [interval], start_m))
                lines = {s.line.key: s.line for s in read_statement(store, "c1", month).lines}
                assert {k: v.micro for k, v in lines.items() if v.micro} == {k: v for k, v in truth.items() if v}
                for key, line in lines.items():
                    amounts = kept[(key, month)]
                    if not amounts or amounts[-1] != line.micro:
                        amounts.append(line.micro)
                    summed[(key[1], key[2])] += Decimal(line.micro).scaleb(-6)
            if step < len(MONTHS):
                # the ledger: what is posted through this month's end is every month stated so far, summed
                assert postings_sql(store, "c1", end) == {k: v for k, v in summed.items() if v}

        # every re-statement kept the versions before it, each with its previous amount and difference
        for (key, month), amounts in kept.items():
            every = [s.line for s in read_statement(store, "c1", month, versions=True).lines if s.line.key == key]
            assert [x.version for x in every] == list(range(1, len(every) + 1))
            assert [x.micro for x in every] == amounts
            assert all(x.previous == (every[i - 1].micro if i else None) for i, x in enumerate(every))
            assert sum(x.difference for x in every) == every[-1].micro
            restated.append(len(every) - 1)

    holds()
    assert sum(restated) >= 2  # the examples did re-state (the explicit one: October and November)
