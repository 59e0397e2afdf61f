"""One poison item is refused alone: a batch answers item by item whatever one item holds (issue #26)."""

from __future__ import annotations

import json

import pytest
from starlette.testclient import TestClient

from tally_pipeline.api.app import ApiContext, create_app
from tally_pipeline.services.ingest import Ingestor
from tally_pipeline_tests.events import event

HUGE_INTEGER = "7" * 4301  # one digit past what Python converts
DEEP = "[" * 1200 + "]" * 1200  # deeper than either JSON reader goes


def _body(poison: str) -> bytes:
    before, after = event(), event()
    return ('{"events": [' + json.dumps(before) + ', {"event_id": "poison", "payload": ' + poison + "}, "
            + json.dumps(after) + "]}").encode()


@pytest.mark.parametrize(("poison", "why"), [(HUGE_INTEGER, "4300 digits"), (DEEP, "nested deeper")])
def test_a_poison_item_is_refused_alone(store, registry, poison: str, why: str) -> None:
    client = TestClient(create_app(ApiContext(store=store, ingestor=Ingestor(store, registry))))
    response = client.post("/v1/events", content=_body(poison), headers={"content-type": "application/json"})
    assert response.status_code == 200, response.text
    answer = response.json()
    assert [r["status"] for r in answer["results"]] == ["stored", "rejected", "stored"]
    refused = answer["results"][1]
    assert refused["reason"] == "invalid_item" and why in refused["message"]
    assert store.event_count() == 2
    (dead,) = store.rejected()
    assert dead.reason == "invalid_item" and why in dead.message
    found, raw = store.rejected_raw(dead.id)
    assert found and raw is not None and poison in raw and '"event_id": "poison"' in raw


def test_a_body_broken_outside_its_items_is_still_refused_whole(store, registry) -> None:
    client = TestClient(create_app(ApiContext(store=store, ingestor=Ingestor(store, registry))))
    body = _body(HUGE_INTEGER)[:-1]  # the closing brace is missing: the body itself is broken
    response = client.post("/v1/events", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 400 and response.json()["error"] == "invalid_json"
    assert store.event_count() == 0 and [d.reason for d in store.rejected()] == ["invalid_json"]
