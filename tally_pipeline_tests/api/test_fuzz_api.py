"""The ingest API under hostile input, on both backends: never a 500, every item accounted for, every
rejected item in the dead letter, every stored item retrievable, every answer as docs/openapi.yaml says."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from decimal import Decimal
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from tally_pipeline.api.quota import DeadLetterQuota
from tally_pipeline.store import Store
from tally_pipeline_tests.api.openapi_spec import check_answer
from tally_pipeline_tests.api_setup import build_api
from tally_pipeline_tests.collector_api import volume_event
from tally_pipeline_tests.hostile import batches, json_values, odd_text, to_body


@pytest.fixture(name="store", scope="module")
def module_wide_store(module_store: Store) -> Store:
    """This module's tests share one store per backend (``module_store``, api/conftest.py)."""
    return module_store


_run = itertools.count()
FUZZ = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture
def client(store: Store) -> TestClient:
    # Anonymous (no tokens file), as on loopback: auth has its own tests; here every request reaches the store.
    # No dead-letter rate either (test_dead_letter_limits.py has its own): this client floods on purpose.
    api = build_api(store, max_body_bytes=5 * 1024 * 1024, anonymous=True)
    api.ctx.dead_letter_quota = DeadLetterQuota(2**62)
    return TestClient(api.app, raise_server_exceptions=False)


def last_dead_letter_id(store: Store) -> int:
    return int(store.query("SELECT coalesce(max(id), 0) FROM rejected_events")[0][0])


def conflict_copies(store: Store) -> int:
    return int(store.query(
        "SELECT coalesce(sum(coalesce(repeats, 1)), 0) FROM rejected_events WHERE reason = 'duplicate_conflict'")[0][0])


def dead_letter_since(store: Store, after: int) -> list[tuple[str, str | None, str | None]]:
    return [tuple(row) for row in store.query(
        "SELECT reason, event_id, raw FROM rejected_events WHERE id > %s ORDER BY id", [after])]


def path_segment(text: str) -> str:
    # Dots too: a client may resolve "." and ".." segments before sending.
    return quote(text, safe="").replace(".", "%2E")


def post_batch(client: TestClient, store: Store, items: list[Any]) -> dict[str, Any] | None:
    """Post ``items``, check every promise the API makes about the answer, and return it (None for a 400)."""
    before_events = store.event_count()
    before_dead = last_dead_letter_id(store)
    before_conflicts = conflict_copies(store)
    body = to_body({"events": items})
    response = client.post("/v1/events", content=body, headers={"content-type": "application/json"})
    assert response.status_code != 500, response.text
    check_answer("POST", "/v1/events", response)
    dead = dead_letter_since(store, before_dead)
    if response.status_code == 400:  # the whole body was unreadable (NaN, 1e400 as a key, ...): kept whole
        assert response.json()["error"] == "invalid_json"
        assert [reason for reason, _, _ in dead] == ["invalid_json"]
        assert store.event_count() == before_events
        return None
    assert response.status_code == 200
    answer = response.json()
    results = answer["results"]
    assert len(results) == len(items)
    assert [r["index"] for r in results] == list(range(len(items)))
    counts = Counter(r["status"] for r in results)
    assert (answer["stored"], answer["duplicates"], answer["rejected"]) == (
        counts["stored"], counts["duplicate"], counts["rejected"])
    assert answer["stored"] + answer["duplicates"] + answer["rejected"] == len(items)
    assert store.event_count() == before_events + answer["stored"]
    # Every rejected item has its dead-letter row, and every duplicate whose content differed is counted
    # in one: a row per (cloud, event_id, content), its repeats growing when the same copy comes again.
    expected = Counter(r["reason"] for r in results if r["status"] == "rejected")
    assert Counter(reason for reason, _, _ in dead if reason != "duplicate_conflict") == +expected
    conflicts = sum(1 for r in results if r.get("conflict"))
    assert conflict_copies(store) == before_conflicts + conflicts
    assert sum(1 for reason, _, _ in dead if reason == "duplicate_conflict") <= conflicts
    for raw in (raw for _, _, raw in dead):
        assert raw is not None and "\x00" not in raw
    # Every stored item can be read back where its resource lives.
    for result in results:
        if result["status"] != "stored":
            continue
        item = items[result["index"]]
        path = "/v1/resources/{}/{}/{}/events".format(*(path_segment(item[k]) for k in (
            "cloud", "resource_type", "resource_id")))
        history = client.get(path)
        assert history.status_code == 200, (path, history.text)
        check_answer("GET", path, history)
        assert result["event_id"] in [e["event_id"] for e in history.json()["events"]]
    return answer


@pytest.mark.slow
@FUZZ
@given(data=st.data())
def test_any_batch_is_answered_item_by_item(client: TestClient, store: Store, data: st.DataObject) -> None:
    prefix = f"fz{next(_run)}"
    first = data.draw(batches(prefix), label="first batch")
    post_batch(client, store, first)
    # Sent again, mixed with new items (the at-least-once case): nothing is stored twice.
    again = data.draw(st.lists(st.sampled_from(first), max_size=5) if first else st.just([]), label="resent")
    post_batch(client, store, again + data.draw(batches(prefix + "b"), label="second batch"))


@FUZZ
@given(body=st.one_of(
    st.binary(max_size=300),
    json_values.map(to_body),
    st.builds(lambda v, cut: to_body({"events": [v]})[:cut], json_values, st.integers(0, 200)),
    odd_text.map(lambda t: t.encode("utf-8", "surrogatepass")),
))
def test_any_body_is_answered_without_a_server_error(client: TestClient, store: Store, body: bytes) -> None:
    before = last_dead_letter_id(store)
    for path in ("/v1/events", "/v1/event"):
        response = client.post(path, content=body, headers={"content-type": "application/json"})
        assert response.status_code in (200, 201, 400), response.text
        check_answer("POST", path, response)
        if response.status_code == 400 and "error" in response.json():
            assert response.json()["error"] in ("invalid_json", "invalid_body")
            assert dead_letter_since(store, before)[-1][0] == response.json()["error"]
        before = last_dead_letter_id(store)


@pytest.mark.parametrize("depth", [1, 250, 260, 900, 990, 1100, 5000])
def test_deep_nesting_is_answered_without_a_server_error(client: TestClient, store: Store, depth: int) -> None:
    event = volume_event(depth, event_id=f"deep-{depth}", payload={"size": {"gb": 1}, "deep": "HERE"})
    text = json.dumps({"events": [event, volume_event(depth, event_id=f"shallow-{depth}")]})
    response = client.post("/v1/events", content=text.replace('"HERE"', "[" * depth + "1" + "]" * depth).encode())
    assert response.status_code in (200, 400), response.text
    check_answer("POST", "/v1/events", response)
    if response.status_code == 200:
        statuses = [r["status"] for r in response.json()["results"]]
        assert statuses[1] == "stored"
        # orjson writes at most 254 levels: deeper payloads cannot be stored and are refused, item by item;
        # nesting deeper than the JSON readers go (about 1,000 levels) makes the item unreadable, refused
        # alone as invalid_item while its neighbour is stored (issue #26)
        if depth <= 100:
            assert statuses[0] == "stored"
        elif depth >= 260:
            reason = response.json()["results"][0]["reason"]
            assert reason == ("invalid_item" if depth >= 990 else "invalid_payload"), response.json()


@pytest.mark.parametrize(
    ("literal", "reason"),
    [("18446744073709551616", "number_out_of_range"), ("-9223372036854775809", "number_out_of_range"),
     ("1e400", "number_out_of_range"), ("-1e400", "number_out_of_range")],
)
def test_numbers_out_of_range_are_refused_per_item_never_rounded(
    client: TestClient, store: Store, literal: str, reason: str
) -> None:
    good = json.dumps(volume_event(1, event_id=f"fits-{literal}"))
    bad = json.dumps(volume_event(2, event_id=f"too-big-{literal}")).replace('"payload": {', f'"payload": {{"n": {literal}, ', 1)
    response = client.post("/v1/events", content=f'{{"events": [{good}, {bad}]}}'.encode())
    assert response.status_code == 200
    first, second = response.json()["results"]
    assert first["status"] == "stored"
    assert second["status"] == "rejected" and second["reason"] == reason
    (row,) = [r for r in store.rejected(reason=reason) if r.event_id == f"too-big-{literal}"]
    assert literal.lstrip("-").split("e")[0] in row.raw  # the dead letter keeps the number as sent


def test_odd_unicode_in_every_field_is_stored_or_refused_and_always_answered(client: TestClient, store: Store) -> None:
    items, cases = [], []
    for i, text in enumerate(["\ud800", "\x00", "\u202eevil", "\U0001f600", "\ufeff", "\\", "'; DROP TABLE events; --"]):
        for field in ("event_id", "resource_id", "project_id", "cloud"):
            item = volume_event(len(items), event_id=f"odd-{len(items)}")
            item[field] = f"odd-{i}{text}" if field == "event_id" else text
            items.append(item)
            cases.append((field, text))
    answer = post_batch(client, store, items)
    assert answer is not None
    for (field, text), result in zip(cases, answer["results"]):
        # Nothing stored can hold NUL or a lone surrogate; a cloud name is [A-Za-z0-9_.-]; the rest is kept.
        refused = "\x00" in text or "\ud800" in text or field == "cloud"
        assert result["status"] == ("rejected" if refused else "stored"), (field, text, result)


@pytest.mark.parametrize("number", [1e300, 1.5e30, -1e20, 5e-324, 2**64 - 1])
def test_a_stored_number_reads_back_as_the_same_number(client: TestClient, store: Store, number: float) -> None:
    # PostgreSQL's jsonb gives 1e300 back as a 301-digit integer: the answer must still be written, and equal.
    event = volume_event(7, event_id=f"n-{number!r}", resource_id=f"n-{number!r}", payload={"size": {"gb": 1}, "n": number})
    assert client.post("/v1/event", json=event).status_code == 201
    path = f"/v1/resources/c1/volume/{quote(event['resource_id'])}/events"
    history = client.get(path)
    assert history.status_code == 200, history.text
    check_answer("GET", path, history)
    (stored,) = json.loads(history.content)["events"]
    # Equal as JSON numbers (jsonb may spell 1e300 as 1 followed by 300 zeros), compared exactly in decimal.
    assert Decimal(str(stored["payload"]["n"])) == Decimal(repr(number))
