"""``GET /v1/usage`` on both stores: posted usage grouped by period, pending usage against what the
poster then posts, aged-out usage as its own account, reader scoping, pagination, CSV, bad parameters."""

from __future__ import annotations

import csv
import io
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from starlette.testclient import TestClient

from tally_pipeline.api.app import ApiContext, create_app
from tally_pipeline.api.auth import Principal, TokenBook, TokensFileError, digest
from tally_pipeline.core.ledger import EntityKey
from tally_pipeline.core.usage import to_micro
from tally_pipeline.services import projection
from tally_pipeline.services.ingest import Ingestor
from tally_pipeline.services.ledger.poster import post_usage
from tally_pipeline.store import Store
from tally_pipeline_tests.api.openapi_spec import check_answer
from tally_pipeline_tests.ledger_data import Row, insert, model_usage, vm
from tally_pipeline_tests.services.test_projection import envelope

T0 = datetime(2026, 3, 1, tzinfo=UTC)
LAG = timedelta(seconds=900)  # the ledger's defaults: ingest_lag 900 s, window_days 35
WINDOW_DAYS = 35

TOKENS = {
    "usage-read-all-0000000": frozenset({"read"}),
    "usage-read-c1-00000000": frozenset({"read:c1"}),
    "usage-read-c1-c3-00000": frozenset({"read:c1", "read:c3"}),
    "usage-ingest-000000000": frozenset({"ingest:*"}),
}


class Clock:
    def __init__(self, now: datetime):
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def api(store: Store, registry):
    clock = Clock(T0)
    book = TokenBook([(digest(t), Principal(t, scopes)) for t, scopes in TOKENS.items()])
    ctx = ApiContext(store=store, ingestor=Ingestor(store, registry), tokens=book, clock=clock)
    return TestClient(create_app(ctx)), ctx, clock


def get(client: TestClient, token: str = "usage-read-all-0000000", **params) -> dict:
    response = client.get("/v1/usage", params=params, headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200, response.text
    check_answer("GET", "/v1/usage", response)
    return response.json()


def rows_of(body: dict) -> dict[tuple, Decimal]:
    return {(r["cloud"], r["project_id"], r["meter"], r["period"], r["account"], r["provisional"]): Decimal(r["quantity"])
            for r in body["usage"]}


def cycle(store: Store, registry, now: datetime):
    projection.refresh(store)  # as `tally post-usage` does before it posts
    result = post_usage(store, registry, now=now, ingest_lag=LAG, window_days=WINDOW_DAYS)
    assert result.clean, result.to_dict()
    return result


def test_posted_usage_by_day_month_and_in_all(api, store, registry) -> None:
    client, ctx, clock = api
    ctx.ingestor.ingest([envelope("a1", "v1", "create", T0, "p1", 10),
                         envelope("a2", "v2", "create", T0 + timedelta(hours=1), "p2", 4, cloud="c2")], origin="t")
    cycle(store, registry, T0 + timedelta(hours=2) + LAG)  # clamp T0+2h, day 1: v1 20, v2 4
    cycle(store, registry, T0 + timedelta(hours=24) + LAG)  # clamp day 2, 00:00: v1 +220, v2 +88
    clock.now = T0 + timedelta(hours=30)

    days = get(client, group="day")
    assert rows_of(days) == {
        ("c1", "p1", "volume_gb_hours", "2026-03-01", "usage", False): Decimal("20"),
        ("c1", "p1", "volume_gb_hours", "2026-03-02", "usage", False): Decimal("220"),
        ("c2", "p2", "volume_gb_hours", "2026-03-01", "usage", False): Decimal("4"),
        ("c2", "p2", "volume_gb_hours", "2026-03-02", "usage", False): Decimal("88"),
    }
    assert days["usage"][0]["unit"] == "GiB-hour" and days["usage"][0]["quantity"] == "20.000000"
    assert days["posted_to"] == "2026-03-02T00:00:00Z"
    assert days["as_of"] == "2026-03-02T05:45:00Z"  # the clamp: now − ingest_lag
    assert days["next_cursor"] is None
    month = get(client, group="month", project_id="p1")
    assert rows_of(month) == {("c1", "p1", "volume_gb_hours", "2026-03", "usage", False): Decimal("240")}
    whole = get(client, cloud="c2")
    assert rows_of(whole) == {("c2", "p2", "volume_gb_hours", None, "usage", False): Decimal("92")}
    # from/to select postings by their clamp: [from, to)
    second_day = get(client, **{"from": "2026-03-02T00:00:00Z", "to": "2026-03-03T00:00:00+00:00"})
    assert sum(rows_of(second_day).values()) == Decimal("308")
    assert get(client, meter="vcpu_hours")["usage"] == []
    # nothing posted is ever provisional, and the totals are the ledger's
    posted = store.query("SELECT sum(amount) FROM ledger_postings")[0][0]
    assert sum(rows_of(get(client)).values()) == posted


def test_pending_is_what_the_next_cycle_posts_and_aged_out_is_its_own_account(api, store, registry) -> None:
    client, ctx, clock = api
    ctx.ingestor.ingest([envelope("b1", "v1", "create", T0, "p1", 10)], origin="t")
    cycle(store, registry, T0 + timedelta(hours=24) + LAG)  # posted through 2026-03-02T00:00
    # A volume that lived for 3 hours fifty days ago, reported only now: older than the 35-day window.
    old = T0 + timedelta(hours=27) - timedelta(days=50)
    ctx.ingestor.ingest([envelope("b2", "v2", "create", old, "p2", 20),
                         envelope("b3", "v2", "delete", old + timedelta(hours=3), None, None)], origin="t")
    now = T0 + timedelta(hours=27) + LAG
    clock.now = now

    before = get(client, group="day", include="pending")
    provisional = {k: v for k, v in rows_of(before).items() if k[5]}
    assert provisional == {
        ("c1", "p1", "volume_gb_hours", "2026-03-02", "usage", True): Decimal("30"),  # 3 h since the checkpoint
        ("c1", "p2", "volume_gb_hours", "2026-03-02", "aged_out", True): Decimal("60"),
    }
    by_project = {r["project_id"]: r for r in before["usage"] if r["provisional"]}
    assert by_project["p1"]["posted_to"] == "2026-03-02T00:00:00Z"
    assert by_project["p2"]["posted_to"] is None  # never posted
    assert before["as_of"] == "2026-03-02T03:00:00Z" and before["posted_to"] == "2026-03-02T00:00:00Z"
    # without include=pending, only what is posted
    assert not any(r["provisional"] for r in get(client, group="day")["usage"])

    result = cycle(store, registry, now)  # the project's own poster, at the same instant
    new = store.query("SELECT cloud, project_id, meter, account, amount FROM ledger_postings WHERE clamp = %s",
                      [result.clamp])
    assert {(c, p, m, "2026-03-02", a, True): amount for c, p, m, a, amount in new} == provisional

    after = get(client, group="day", include="pending")
    assert not any(r["provisional"] for r in after["usage"])  # nothing left pending at this clamp
    assert after["posted_to"] == "2026-03-02T03:00:00Z"
    assert rows_of(after)[("c1", "p2", "volume_gb_hours", "2026-03-02", "aged_out", False)] == Decimal("60")
    # the first cycle's 240 (clamp 2026-03-02T00:00) and this one's 30 are both dated on the 2nd
    assert rows_of(after)[("c1", "p1", "volume_gb_hours", "2026-03-02", "usage", False)] == Decimal("270")
    # the pending answer before the cycle and the posted one after it add up to the same per account
    def per_account(body: dict) -> dict[str, Decimal]:
        out: dict[str, Decimal] = defaultdict(Decimal)
        for r in body["usage"]:
            out[r["account"]] += Decimal(r["quantity"])
        return dict(out)
    assert per_account(before) == per_account(after) == {"usage": Decimal("270"), "aged_out": Decimal("60")}


def test_pending_outside_from_to_is_not_shown(api, store, registry) -> None:
    client, ctx, clock = api
    ctx.ingestor.ingest([envelope("c1", "v1", "create", T0, "p1", 10)], origin="t")
    clock.now = T0 + timedelta(hours=5)
    assert rows_of(get(client, include="pending")) == {
        ("c1", "p1", "volume_gb_hours", None, "usage", True): Decimal("47.5")}
    assert get(client, include="pending", to="2026-03-01T04:00:00Z")["usage"] == []  # as_of 04:45 is past `to`
    assert get(client, include="pending", **{"from": "2026-03-01T05:00:00Z"})["usage"] == []


def test_reader_tokens_read_only_their_clouds(api, store, registry) -> None:
    client, ctx, clock = api
    ctx.ingestor.ingest([envelope(f"s{c}", "v1", "create", T0, "p1", 1, cloud=c) for c in ("c1", "c2", "c3")],
                        origin="t")
    clock.now = T0 + timedelta(hours=2)
    clouds = lambda body: sorted({r["cloud"] for r in body["usage"]})  # noqa: E731
    assert clouds(get(client, include="pending")) == ["c1", "c2", "c3"]
    assert clouds(get(client, "usage-read-c1-00000000", include="pending")) == ["c1"]
    assert clouds(get(client, "usage-read-c1-c3-00000", include="pending")) == ["c1", "c3"]
    assert clouds(get(client, "usage-read-c1-c3-00000", include="pending", cloud="c3")) == ["c3"]

    def status(token: str | None, **params) -> tuple[int, str]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        response = client.get("/v1/usage", params=params, headers=headers)
        check_answer("GET", "/v1/usage", response)
        return response.status_code, response.json()["error"]

    assert status("usage-read-c1-00000000", cloud="c2") == (403, "forbidden")
    assert status("usage-ingest-000000000") == (403, "forbidden")
    assert status(None) == (401, "unauthorized")
    assert status("not-a-token-0000000000") == (401, "unauthorized")
    # read:<cloud> grants usage only, not the other read routes
    inventory = client.get("/v1/inventory", headers={"Authorization": "Bearer usage-read-c1-00000000"})
    assert inventory.status_code == 403


def test_pages_walk_every_row_once_in_order_posted_and_pending(api, store, registry) -> None:
    client, ctx, clock = api
    # 60 projects × 3 instance meters, two posted days each; half the projects also have a volume that
    # starts after the second cycle (pending only, never posted): posted and pending rows interleave.
    rows = [Row(f"p{n:03d}", f"vm{n}", T0, None, vm(vcpus=1 + n % 4)) for n in range(60)]
    rows += [Row(f"p{n:03d}", f"vol{n}", T0 + timedelta(hours=25), None, {"gb": 1 + n}, resource_type="volume")
             for n in range(0, 60, 2)]
    insert(store, *rows)
    post_usage(store, registry, now=T0 + timedelta(hours=3) + LAG, ingest_lag=LAG, window_days=WINDOW_DAYS)
    post_usage(store, registry, now=T0 + timedelta(hours=24) + LAG, ingest_lag=LAG, window_days=WINDOW_DAYS)
    clock.now = T0 + timedelta(hours=30) + LAG

    whole = get(client, group="day", include="pending", limit=1000)
    assert whole["next_cursor"] is None
    seen: list[dict] = []
    cursor = None
    pages = 0
    while True:
        params = {"group": "day", "include": "pending", "limit": 37}
        if cursor:
            params["cursor"] = cursor
        page = get(client, **params)
        pages += 1
        assert len(page["usage"]) <= 37
        seen += page["usage"]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == whole["usage"]
    n_rows = 60 * 3 * 3 + 30  # per instance meter: day 1, day 2 posted, day 2 pending; per volume: pending
    assert len(seen) == n_rows and pages == -(-n_rows // 37)
    keys = [(r["cloud"], r["project_id"], r["meter"], r["period"], r["account"], r["provisional"]) for r in seen]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    # posted + pending = each entity's usage through as_of, by the Python rule
    totals: dict[EntityKey, int] = defaultdict(int)
    for r in seen:
        totals[EntityKey(r["cloud"], r["project_id"], r["meter"])] += to_micro(r["quantity"])
    assert dict(totals) == model_usage(registry, rows, T0 + timedelta(hours=30))
    # the cursor carries the grouping it was issued for
    first = get(client, group="day", limit=5)
    bad = client.get("/v1/usage", params={"group": "month", "cursor": first["next_cursor"]},
                     headers={"Authorization": "Bearer usage-read-all-0000000"})
    assert bad.status_code == 400 and bad.json()["error"] == "invalid_cursor"


def test_csv_answers_the_same_rows(api, store, registry) -> None:
    client, ctx, clock = api
    ctx.ingestor.ingest([envelope("d1", "v1", "create", T0, "p,1", 10), envelope("d2", "v2", "create", T0, "p2", 3)],
                        origin="t")
    cycle(store, registry, T0 + timedelta(hours=2) + LAG)
    clock.now = T0 + timedelta(hours=4)
    headers = {"Authorization": "Bearer usage-read-all-0000000", "Accept": "text/csv"}
    response = client.get("/v1/usage", params={"group": "day", "include": "pending", "limit": 3}, headers=headers)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/csv")
    check_answer("GET", "/v1/usage", response)
    table = list(csv.DictReader(io.StringIO(response.text)))
    as_json = get(client, group="day", include="pending", limit=3)
    assert [(r["cloud"], r["project_id"], r["period"], r["account"], r["quantity"], r["provisional"]) for r in table] == [
        (r["cloud"], r["project_id"], r["period"], r["account"], r["quantity"], str(r["provisional"]).lower())
        for r in as_json["usage"]]
    assert table[0]["project_id"] == "p,1"  # quoted, not split
    assert response.headers["tally-as-of"] == as_json["as_of"] == "2026-03-01T03:45:00Z"
    assert response.headers["tally-posted-to"] == as_json["posted_to"] == "2026-03-01T02:00:00Z"
    assert response.headers["tally-next-cursor"] == as_json["next_cursor"]
    rest = client.get("/v1/usage", params={"group": "day", "include": "pending", "cursor": as_json["next_cursor"]},
                      headers=headers)
    assert len(list(csv.DictReader(io.StringIO(rest.text)))) == 1 and "tally-next-cursor" not in rest.headers
    # JSON first in Accept, or no preference: JSON
    for accept in ("application/json, text/csv", "*/*", "text/html"):
        answer = client.get("/v1/usage", headers={**headers, "Accept": accept})
        assert answer.headers["content-type"].startswith("application/json")


@pytest.mark.parametrize(("params", "code", "says"), [
    ({"from": "2026-03-02T00:00:00Z", "to": "2026-03-01T00:00:00Z"}, "invalid_parameter", "must be before"),
    ({"from": "2026-03-01T00:00:00Z", "to": "2026-03-01T00:00:00Z"}, "invalid_parameter", "must be before"),
    ({"from": "yesterday"}, "invalid_parameter", "from"),
    ({"to": "2026-03-01T00:00:00"}, "invalid_parameter", "to"),
    ({"group": "week"}, "invalid_parameter", "group must be one of none, day, month"),
    ({"include": "everything"}, "invalid_parameter", "include"),
    ({"limit": "0"}, "invalid_parameter", "limit"),
    ({"cursor": "bm9wZQ"}, "invalid_cursor", "cursor"),
    ({"cursor": "eyJhZnRlciI6WzEsMiwzXX0"}, "invalid_cursor", "cursor"),  # {"after":[1,2,3]}
    ({"project_id": "a\x00b"}, "invalid_parameter", "NUL"),
])
def test_bad_parameters_are_400_with_a_clear_reason(api, params, code, says) -> None:
    client, _, _ = api
    response = client.get("/v1/usage", params=params, headers={"Authorization": "Bearer usage-read-all-0000000"})
    assert response.status_code == 400
    check_answer("GET", "/v1/usage", response)
    assert response.json()["error"] == code and says in response.json()["detail"]


def test_the_tokens_file_takes_read_cloud_scopes(tmp_path) -> None:
    path = tmp_path / "tokens.yaml"
    path.write_text("tokens:\n  - {name: tenant, token: a-long-tenant-secret-01, scopes: ['read:c1', 'read:c-2.x']}\n")
    principal = TokenBook.load(path).authenticate("a-long-tenant-secret-01")
    assert principal is not None and principal.readable_clouds() == {"c1", "c-2.x"} and not principal.has("read")
    path.write_text("tokens:\n  - {token: a-long-tenant-secret-01, scopes: ['read:c/1']}\n")
    with pytest.raises(TokensFileError, match=r"unknown scope 'read:c/1' \(read, read:<cloud>"):
        TokenBook.load(path)


def test_the_live_balance_is_this_months_posted_plus_pending(api, store, registry) -> None:
    client, ctx, clock = api
    feb = T0 - timedelta(hours=2)  # 2026-02-28T22:00
    old = T0 - timedelta(days=50)  # far before the 35-day window: aged out
    ctx.ingestor.ingest([envelope("e1", "v1", "create", feb, "p1", 10),
                         envelope("e2", "v9", "create", T0, "p9", 1)], origin="t")
    cycle(store, registry, feb + timedelta(hours=1) + LAG)  # posts 10 dated in February
    cycle(store, registry, T0 + timedelta(hours=2) + LAG)  # posts 30 dated in March
    ctx.ingestor.ingest([envelope("e3", "v2", "create", old, "p1", 2),
                         envelope("e4", "v2", "delete", old + timedelta(hours=5), None, None)], origin="t")
    projection.refresh(store)  # the live balance reads the projection as last folded
    clock.now = T0 + timedelta(hours=5) + LAG

    response = client.get("/v1/usage/c1/p1/current", headers={"Authorization": "Bearer usage-read-c1-00000000"})
    assert response.status_code == 200, response.text
    check_answer("GET", "/v1/usage/c1/p1/current", response)
    body = response.json()
    assert (body["month"], body["from"], body["as_of"], body["posted_to"]) == (
        "2026-03", "2026-03-01T00:00:00Z", "2026-03-01T05:00:00Z", "2026-03-01T02:00:00Z")
    assert body["balances"] == [
        {"meter": "volume_gb_hours", "account": "aged_out", "unit": "GiB-hour", "posted": "0.000000",
         "pending": "10.000000", "total": "10.000000"},
        {"meter": "volume_gb_hours", "account": "usage", "unit": "GiB-hour", "posted": "30.000000",
         "pending": "30.000000", "total": "60.000000"},
    ]
    # the same numbers as the general route over this month, with pending
    month = get(client, project_id="p1", cloud="c1", include="pending", **{"from": "2026-03-01T00:00:00Z"})
    assert sum(rows_of(month).values()) == Decimal("70")

    def status(path: str, token: str | None) -> int:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        answer = client.get(path, headers=headers)
        check_answer("GET", path, answer)
        return answer.status_code

    assert status("/v1/usage/c2/p1/current", "usage-read-c1-00000000") == 403
    assert status("/v1/usage/c1/p1/current", "usage-ingest-000000000") == 403
    assert status("/v1/usage/c1/p1/current", None) == 401
    nothing = client.get("/v1/usage/c1/nobody/current", headers={"Authorization": "Bearer usage-read-all-0000000"})
    assert nothing.status_code == 200 and nothing.json()["balances"] == [] and nothing.json()["posted_to"] is None
