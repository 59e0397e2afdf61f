"""The ingest API over HTTP: the contract of docs/architecture.md «The HTTP API», bad input, auth — in-process and over a socket."""

from __future__ import annotations

import gzip
import hashlib
import json

import httpx
import pytest
from starlette.testclient import TestClient

from tally_pipeline.api.app import ApiContext, create_app
from tally_pipeline.api.auth import TokenBook
from tally_pipeline.services.ingest import Ingestor
from tally_pipeline_tests.events import event

WRITER = "writer-token-0123456789"
READER = "reader-token-0123456789"
ONE_CLOUD = "one-cloud-token-0123456789"
ADMIN = "admin-token-0123456789"


@pytest.fixture
def tokens(tmp_path) -> TokenBook:
    path = tmp_path / "tokens.yaml"
    path.write_text(
        "tokens:\n"
        f"  - {{token: {WRITER}, scopes: ['ingest:*']}}\n"
        f"  - {{token_sha256: {hashlib.sha256(READER.encode()).hexdigest()}, scopes: [read]}}\n"
        f"  - {{token: {ONE_CLOUD}, scopes: ['ingest:region-one']}}\n"
        f"  - {{token: {ADMIN}, scopes: [admin]}}\n"
    )
    return TokenBook.load(path)


@pytest.fixture
def ctx(store, registry) -> ApiContext:
    return ApiContext(store=store, ingestor=Ingestor(store, registry), max_body_bytes=64 * 1024)


@pytest.fixture
def client(ctx) -> TestClient:
    return TestClient(create_app(ctx))


def dead_letter(store, reason=None):
    return store.rejected(reason=reason)


def test_post_events_answers_one_result_per_item(client, store) -> None:
    a = event()
    body = {"events": [a, {"nope": 1}, a]}
    response = client.post("/v1/events", json=body)
    assert response.status_code == 200
    data = response.json()
    assert data["stored"] == 1 and data["duplicates"] == 1 and data["rejected"] == 1
    assert [r["status"] for r in data["results"]] == ["stored", "rejected", "duplicate"]
    assert data["results"][1]["reason"] == "unknown_field"
    assert "nope" in data["results"][1]["message"]
    assert store.event_count() == 1
    assert [d.reason for d in dead_letter(store)] == ["unknown_field"]


def test_more_than_1000_events_is_413_and_stores_nothing(store, registry) -> None:
    client = TestClient(create_app(ApiContext(store=store, ingestor=Ingestor(store, registry))))
    response = client.post("/v1/events", json={"events": [event() for _ in range(1001)]})
    assert response.status_code == 413
    assert response.json() == {"error": "batch_too_large", "detail": "1001 events in one batch", "max": 1000}
    assert store.event_count() == 0


def test_exactly_1000_events_is_accepted(store, registry) -> None:
    ctx = ApiContext(store=store, ingestor=Ingestor(store, registry))
    response = TestClient(create_app(ctx)).post("/v1/events", json={"events": [event() for _ in range(1000)]})
    assert response.status_code == 200 and response.json()["stored"] == 1000


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b"this is not json", "invalid_json"),
        (b'{"events": [', "invalid_json"),
        (b"\xff\xfe{\x00", "invalid_json"),
        (b'{"events": [1, 2]} trailing', "invalid_json"),
        (b"[]", "invalid_body"),
        (b'{"event": []}', "invalid_body"),
        (b'{"events": {}}', "invalid_body"),
        (b'{"events": [], "extra": 1}', "invalid_body"),
        (b"null", "invalid_body"),
        (b'{"events": [1e400]}', None),  # valid JSON, an item that is not an event
    ],
)
def test_bad_bodies_are_400_and_kept_in_the_dead_letter(client, store, body, error) -> None:
    response = client.post("/v1/events", content=body, headers={"content-type": "application/json"})
    if error is None:
        assert response.status_code == 200 and response.json()["rejected"] == 1
        return
    assert response.status_code == 400
    assert response.json()["error"] == error and response.json()["detail"]
    dead = dead_letter(store)
    assert len(dead) == 1 and dead[0].reason == error
    assert dead[0].raw is not None and len(dead[0].raw) > 0
    if body.isascii():
        assert dead[0].raw == body.decode() or json.loads(dead[0].raw) == json.loads(body)
    assert store.event_count() == 0


def test_body_over_the_limit_is_413_by_header_and_by_stream(client, store) -> None:
    big = json.dumps({"events": [event(payload={"size": event()["payload"]["size"], "pad": "x" * 60_000}),
                                  event(payload={"size": event()["payload"]["size"], "pad": "y" * 60_000})]}).encode()
    response = client.post("/v1/events", content=big)
    assert response.status_code == 413 and response.json()["error"] == "body_too_large"

    def chunks():  # no Content-Length: the server must stop reading at the limit
        for i in range(0, len(big), 4096):
            yield big[i:i + 4096]

    response = client.post("/v1/events", content=chunks())
    assert response.status_code == 413
    assert store.event_count() == 0


def test_single_event_endpoint(client, store) -> None:
    e = event()
    first = client.post("/v1/event", json=e)
    assert first.status_code == 201 and first.json() == {"event_id": e["event_id"], "status": "stored"}
    again = client.post("/v1/event", json=e)
    assert again.status_code == 200 and again.json()["status"] == "duplicate"
    bad = client.post("/v1/event", json=event(occurred_at="2026-01-01T00:00:00"))
    assert bad.status_code == 400 and bad.json()["reason"] == "invalid_timestamp"
    not_json = client.post("/v1/event", content=b"{")
    assert not_json.status_code == 400 and not_json.json()["error"] == "invalid_json"
    assert {d.reason for d in dead_letter(store)} == {"invalid_timestamp", "invalid_json"}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"event_id": ""}, "invalid_field"),
        ({"event_type": "NOPE"}, "invalid_field"),
        ({"cloud": "a/b"}, "invalid_field"),
        ({"resource_type": "teleporter"}, "unknown_resource_type"),
        ({"resource_id": ""}, "invalid_field"),
        ({"project_id": None}, "missing_project_id"),
        ({"occurred_at": "2026-03-01T12:00:00"}, "invalid_timestamp"),
        ({"source": "reconciliation"}, "forbidden_source"),
        ({"payload": {"size": {"gb": 1}}}, "size_schema"),
        ({"extra_field": 1}, "unknown_field"),
    ],
)
def test_each_broken_rule_over_http(client, store, change, reason) -> None:
    response = client.post("/v1/events", json={"events": [event(**change)]})
    assert response.status_code == 200
    assert response.json()["results"][0]["reason"] == reason
    assert [d.reason for d in dead_letter(store)] == [reason]


def test_auth_scopes_and_forbidden_cloud(store, registry, tokens) -> None:
    ctx = ApiContext(store=store, ingestor=Ingestor(store, registry), tokens=tokens)
    client = TestClient(create_app(ctx))
    body = {"events": [event(cloud="region-one"), event(cloud="region-two")]}
    assert client.post("/v1/events", json=body).status_code == 401
    assert client.post("/v1/events", json=body, headers={"Authorization": "Bearer wrong-token-000000"}).status_code == 401
    assert client.post("/v1/events", json=body, headers={"Authorization": f"Bearer {READER}"}).status_code == 403
    limited = client.post("/v1/events", json=body, headers={"Authorization": f"Bearer {ONE_CLOUD}"})
    assert limited.status_code == 200
    assert [r["status"] for r in limited.json()["results"]] == ["stored", "rejected"]
    assert limited.json()["results"][1]["reason"] == "forbidden_cloud"
    full = client.post("/v1/events", json={"events": [event(cloud="region-two")]}, headers={"Authorization": f"Bearer {WRITER}"})
    assert full.json()["stored"] == 1
    assert client.get("/v1/rejected", headers={"Authorization": f"Bearer {WRITER}"}).status_code == 403
    listed = client.get("/v1/rejected", headers={"Authorization": f"Bearer {READER}"})
    assert listed.status_code == 200 and listed.json()["rejected"][0]["reason"] == "forbidden_cloud"


def test_rejected_listing_filters_and_pages(client, store) -> None:
    for i in range(5):
        client.post("/v1/events", json={"events": [event(cloud="c-a", colour=i)]})
    client.post("/v1/events", json={"events": [event(cloud="c-b", payload={})]})
    page = client.get("/v1/rejected", params={"cloud": "c-a", "limit": 2}).json()
    seen = [r["id"] for r in page["rejected"]]
    while page["next_cursor"]:
        page = client.get("/v1/rejected", params={"cloud": "c-a", "limit": 2, "cursor": page["next_cursor"]}).json()
        seen += [r["id"] for r in page["rejected"]]
    assert len(seen) == 5 and seen == sorted(seen, reverse=True)
    only = client.get("/v1/rejected", params={"reason": "missing_size"}).json()["rejected"]
    assert [r["cloud"] for r in only] == ["c-b"]
    assert json.loads(only[0]["raw"])["cloud"] == "c-b"
    assert client.get("/v1/rejected", params={"since": "2999-01-01T00:00:00Z"}).json()["rejected"] == []
    assert client.get("/v1/rejected", params={"since": "not a time"}).status_code == 400
    assert client.get("/v1/rejected", params={"cursor": "!!"}).status_code == 400
    assert client.get("/v1/rejected", params={"limit": "0"}).status_code == 400


def test_health(client) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200 and response.json()["status"] == "ok"


def test_over_a_real_socket(ctx, store, serve_app) -> None:
    """uvicorn on a free port, a real client: gzip-free JSON, chunked upload, concurrent batches."""
    app = create_app(ctx)
    with httpx.Client(base_url=serve_app(app), timeout=30) as http:
        events = [event() for _ in range(300)]
        first = http.post("/v1/events", json={"events": events[:200]})
        second = http.post("/v1/events", json={"events": events[100:]})
        assert first.status_code == second.status_code == 200
        assert first.json()["stored"] == 200
        assert second.json()["stored"] == 100 and second.json()["duplicates"] == 100
        bad = http.post("/v1/events", content=gzip.compress(b"{}"))
        assert bad.status_code == 400
        assert http.get("/healthz").json()["status"] == "ok"
    assert store.event_count() == 300
