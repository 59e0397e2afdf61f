"""Query endpoints over HTTP: history, lifecycle, inventory (filters, as_of, cursor pagination), errors."""

from __future__ import annotations

from datetime import timedelta

import pytest
from starlette.testclient import TestClient

from tally_pipeline.api.app import ApiContext, create_app
from tally_pipeline.services.ingest import Ingestor
from tally_pipeline_tests.services.test_projection import T0, envelope


@pytest.fixture
def setup(store, registry):
    ingestor = Ingestor(store, registry)
    client = TestClient(create_app(ApiContext(store=store, ingestor=ingestor)))
    return client, ingestor


def test_history_and_lifecycle(setup) -> None:
    client, ingestor = setup
    ingestor.ingest([envelope("h1", "vol/with/slashes", "create", T0, "p1", 10),
                     envelope("h2", "vol/with/slashes", "update", T0 + timedelta(hours=1), None, 20)], origin="t")
    events = client.get("/v1/resources/c1/volume/vol/with/slashes/events")
    assert events.status_code == 200
    body = events.json()["events"]
    assert [e["event_id"] for e in body] == ["h1", "h2"]
    assert body[0]["verb"] == "create" and body[0]["occurred_at"] == "2026-03-01T00:00:00Z"
    assert body[0]["received_at"].endswith("Z") and body[0]["payload"] == {"size": {"gb": 10}}
    lifecycle = client.get("/v1/resources/c1/volume/vol/with/slashes/lifecycle").json()
    assert lifecycle["intervals"] == [
        {"start": "2026-03-01T00:00:00Z", "end": "2026-03-01T01:00:00Z", "project_id": "p1", "size": {"gb": 10}, "lifecycle": 0,
         "platform_status": None},
        {"start": "2026-03-01T01:00:00Z", "end": None, "project_id": "p1", "size": {"gb": 20}, "lifecycle": 0,
         "platform_status": None},
    ]
    assert lifecycle["state"]["status"] == "live"


@pytest.mark.parametrize("path", ["/v1/resources/c1/volume/nope/events", "/v1/resources/c1/volume/nope/lifecycle"])
def test_unknown_resource_is_404_with_a_clear_body(setup, path) -> None:
    client, _ = setup
    response = client.get(path)
    assert response.status_code == 404
    assert response.json() == {"error": "not_found", "detail": "no events for resource volume 'nope' in cloud 'c1'"}


def test_inventory_filters_and_as_of(setup) -> None:
    client, ingestor = setup
    ingestor.ingest([
        envelope("i1", "v1", "create", T0, "p1", 10),
        envelope("i2", "v2", "create", T0, "p2", 10),
        envelope("i3", "v3", "create", T0, "p1", 10, cloud="c2"),
        envelope("i4", "v1", "delete", T0 + timedelta(hours=2), None, None),
    ], origin="t")
    now = client.get("/v1/inventory").json()
    assert [(r["cloud"], r["resource_id"]) for r in now["resources"]] == [("c1", "v2"), ("c2", "v3")]
    assert now["next_cursor"] is None
    assert [r["resource_id"] for r in client.get("/v1/inventory", params={"project_id": "p1"}).json()["resources"]] == ["v3"]
    assert [r["resource_id"] for r in client.get("/v1/inventory", params={"cloud": "c1"}).json()["resources"]] == ["v2"]
    assert client.get("/v1/inventory", params={"resource_type": "instance"}).json()["resources"] == []
    past = client.get("/v1/inventory", params={"cloud": "c1", "as_of": "2026-03-01T01:00:00+00:00"}).json()
    assert [(r["resource_id"], r["status"], r["created_at"]) for r in past["resources"]] == [
        ("v1", "live", "2026-03-01T00:00:00Z"), ("v2", "live", "2026-03-01T00:00:00Z")]
    assert client.get("/v1/inventory", params={"as_of": "2026-02-28T00:00:00Z"}).json()["resources"] == []


@pytest.mark.parametrize("params", [{"as_of": "yesterday"}, {"as_of": "2026-03-01T00:00:00"}, {"limit": "x"},
                                    {"limit": "100000"}, {"cursor": "bm9wZQ"}])
def test_bad_query_parameters_are_400(setup, params) -> None:
    client, _ = setup
    response = client.get("/v1/inventory", params=params)
    assert response.status_code == 400
    assert response.json()["error"] in ("invalid_parameter", "invalid_cursor")


def test_pagination_is_stable_while_events_arrive(setup) -> None:
    """Pages by key: resources created or deleted between pages never make a page repeat or skip the others."""
    client, ingestor = setup
    ingestor.ingest([envelope(f"p-{i:03d}", f"vol-{i:03d}", "create", T0, "p1", 10) for i in range(0, 100, 2)], origin="t")
    seen: list[str] = []
    page = client.get("/v1/inventory", params={"limit": 7}).json()
    n = 0
    while True:
        seen += [r["resource_id"] for r in page["resources"]]
        # between pages: new resources (odd numbers) appear, and an already-listed one is deleted
        ingestor.ingest([envelope(f"q-{n}", f"vol-{2 * n + 1:03d}", "create", T0, "p1", 10),
                         envelope(f"d-{n}", seen[0], "delete", T0 + timedelta(hours=1), None, None)], origin="t")
        n += 1
        if not page["next_cursor"]:
            break
        page = client.get("/v1/inventory", params={"limit": 7, "cursor": page["next_cursor"]}).json()
    assert len(seen) == len(set(seen)), "a resource was listed twice"
    assert seen == sorted(seen)
    originals = {f"vol-{i:03d}" for i in range(0, 100, 2)}
    assert originals <= set(seen), "a resource live throughout was skipped"


def test_query_scopes(store, registry, tmp_path) -> None:
    from tally_pipeline.api.auth import TokenBook

    path = tmp_path / "t.yaml"
    path.write_text("tokens:\n  - {token: reader-token-0123456789, scopes: [read]}\n  - {token: writer-token-0123456789, scopes: ['ingest:*']}\n")
    client = TestClient(create_app(ApiContext(store=store, ingestor=Ingestor(store, registry), tokens=TokenBook.load(path))))
    assert client.get("/v1/inventory").status_code == 401
    assert client.get("/v1/inventory", headers={"Authorization": "Bearer writer-token-0123456789"}).status_code == 403
    assert client.get("/v1/inventory", headers={"Authorization": "Bearer reader-token-0123456789"}).status_code == 200
