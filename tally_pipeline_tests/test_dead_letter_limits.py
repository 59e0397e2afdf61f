"""The dead letter has limits: bounded listings with a link to each whole raw item."""

from __future__ import annotations

import json

from starlette.testclient import TestClient

from tally_pipeline.store.base import RAW_PREFIX_CHARS
from tally_pipeline_tests.api_setup import bearer, build_api, token_for
from tally_pipeline_tests.events import event


def test_a_listing_carries_a_bounded_prefix_its_size_and_a_link(store) -> None:
    api = build_api(store, max_body_bytes=1024 * 1024)
    client = TestClient(api.app)
    writer, reader = bearer(token_for("ingest:*")), bearer(token_for("read"))
    big = event(payload={"size": {"flavor_name": "m"}, "junk": "é" * 200_000})  # refused: size_schema
    small = {"colour": "red"}
    outcome = client.post("/v1/events", json={"events": [big, small]}, headers=writer).json()
    assert [r["status"] for r in outcome["results"]] == ["rejected", "rejected"]
    listing = client.get("/v1/rejected?limit=10", headers=reader)
    assert len(listing.content) < 8 * RAW_PREFIX_CHARS  # not the 400 kB item
    rows = {row["reason"]: row for row in listing.json()["rejected"]}
    whole_big = client.get(rows["size_schema"]["raw_url"], headers=reader)
    assert whole_big.status_code == 200 and whole_big.headers["content-type"].startswith("text/plain")
    assert json.loads(whole_big.text) == big
    assert rows["size_schema"]["raw_bytes"] == len(whole_big.text.encode()) > 400_000
    assert rows["size_schema"]["raw_truncated"] is True
    assert rows["size_schema"]["raw"] == whole_big.text[:RAW_PREFIX_CHARS]
    tiny = rows["unknown_field"]
    assert tiny["raw_truncated"] is False and json.loads(tiny["raw"]) == small
    assert tiny["raw_bytes"] == len(tiny["raw"].encode())
    assert client.get(tiny["raw_url"], headers=reader).text == tiny["raw"]
    assert client.get(f"/v1/rejected/{2**70}/raw", headers=reader).status_code == 404
    assert client.get(tiny["raw_url"], headers=writer).status_code == 403
