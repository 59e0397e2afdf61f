"""A size value is stored in the form the meters read: whole-number floats become integers on every
path, non-whole values are refused, custom schemas get the rule, and older histories are migrated."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from tally_pipeline.core.envelope import EventRecord, Rejection, validate_event
from tally_pipeline.core.registry import SizeSchemaRegistry
from tally_pipeline.core.usage import Interval, interval_usage_micro
from tally_pipeline.services import projection
from tally_pipeline.services.ingest import Ingestor
from tally_pipeline.services.landing import ingest_file
from tally_pipeline.store import open_store
from tally_pipeline_tests.api_setup import bearer, build_api, token_for
from tally_pipeline_tests.events import event
from tally_pipeline_tests.services.test_ingest_cloud_scope import _apply_up_to

FLOAT_SIZE = '{"flavor_name": "m1", "vcpus": 2.0, "ram_mb": 1e1, "disk_gb": 20.000}'


def _size_of(store, event_id: str) -> dict:
    payload = store.query("SELECT payload FROM events WHERE event_id = %s", [event_id])[0][0]
    return (json.loads(payload) if isinstance(payload, str) else payload)["size"]


@pytest.mark.parametrize("vcpus", [2.0, 1e1, 4.000])
def test_a_whole_float_is_validated_and_kept_as_the_integer(registry, vcpus: float) -> None:
    record = validate_event(event(payload={"size": {"flavor_name": "m", "vcpus": vcpus, "ram_mb": 1, "disk_gb": 1}}),
                            registry)
    assert isinstance(record, EventRecord)
    assert type(record.payload["size"]["vcpus"]) is int and record.payload["size"]["vcpus"] == vcpus
    assert f'"vcpus":{int(vcpus)}}}' in record.payload_json
    again = validate_event(event(payload={"size": {"flavor_name": "m", "vcpus": vcpus, "ram_mb": 1, "disk_gb": 1}}),
                           registry)  # the remembered size gives the same stored form
    assert isinstance(again, EventRecord) and type(again.payload["size"]["vcpus"]) is int


@pytest.mark.parametrize("vcpus", [2.5, 1e19])
def test_a_non_whole_or_unstorable_value_is_refused(registry, vcpus: float) -> None:
    checked = validate_event(event(payload={"size": {"flavor_name": "m", "vcpus": vcpus, "ram_mb": 1, "disk_gb": 1}}),
                             registry)
    assert isinstance(checked, Rejection) and checked.reason == "size_schema"


def test_a_custom_schema_gets_the_rule_too() -> None:
    custom = SizeSchemaRegistry({"gpu.json": {
        "resource_type": "gpu",
        "size": {"type": "object", "properties": {"cards": {"type": "integer"},
                                                  "nested": {"type": "object"}}},
        "meters": {"gpu_hours": {"unit": "card-hour", "per": "cards"}},
    }})
    record = validate_event(event(resource_type="gpu", payload={"size": {"cards": 3.0, "nested": {"n": [1.0]}}}), custom)
    assert isinstance(record, EventRecord)
    assert record.payload["size"] == {"cards": 3, "nested": {"n": [1]}}
    assert type(record.payload["size"]["cards"]) is int
    meter = custom.meters()[0]
    start = datetime(2026, 1, 1, tzinfo=UTC)
    assert interval_usage_micro(meter, Interval(start, None, record.payload["size"]),
                                datetime(2026, 1, 1, 1, tzinfo=UTC)) == 3_000_000
    refused = validate_event(event(resource_type="gpu", payload={"size": {"cards": 2.5}}), custom)
    assert isinstance(refused, Rejection) and refused.reason == "size_schema"


def test_over_the_api_the_size_is_stored_and_returned_as_integers(store) -> None:
    client = TestClient(build_api(store).app)
    e = event(resource_id="srv-float")
    body = json.dumps({"events": [dict(e, payload="@")]}).replace('"@"', '{"size": ' + FLOAT_SIZE + "}")
    answer = client.post("/v1/events", content=body, headers=bearer(token_for("ingest:*")))
    assert answer.json()["stored"] == 1
    assert _size_of(store, e["event_id"]) == {"flavor_name": "m1", "vcpus": 2, "ram_mb": 10, "disk_gb": 20}
    history = client.get("/v1/resources/region-one/instance/srv-float/events", headers=bearer(token_for("read")))
    returned = history.json()["events"][0]["payload"]["size"]
    assert (type(returned["vcpus"]), type(returned["ram_mb"])) == (int, int)
    # The size object as the response wrote it (the rest of the body holds timestamps, whose digits
    # may read "2.0" anywhere).
    size_text = re.search(r'"size":\s*\{[^}]*\}', history.text).group(0)
    assert '"vcpus":2' in size_text.replace(" ", "") and "2.0" not in size_text and "1e1" not in size_text
    projection.refresh(store)
    lifecycle = client.get("/v1/resources/region-one/instance/srv-float/lifecycle", headers=bearer(token_for("read")))
    size = lifecycle.json()["intervals"][0]["size"]
    assert type(size["vcpus"]) is int and size["ram_mb"] == 10


def test_a_landing_file_stores_integers(store, registry, tmp_path: Path) -> None:
    e = event()
    line = json.dumps(dict(e, payload="@")).replace('"@"', '{"size": ' + FLOAT_SIZE + "}")
    path = tmp_path / "batch.jsonl"
    path.write_text(line + "\n")
    assert ingest_file(Ingestor(store, registry), path).stored == 1
    assert _size_of(store, e["event_id"])["vcpus"] == 2
    assert '"vcpus": 2.0' not in json.dumps(_size_of(store, e["event_id"]))


_OLD_FOLDED_SIZE = '{"disk_gb": null, "flavor_name": "m", "ram_mb": 2.5, "vcpus": 2.0}'


def test_an_older_history_holding_floats_is_migrated_and_refolded(store_url, registry) -> None:
    _apply_up_to(store_url, 6)
    with open_store(store_url, migrate=False) as old:
        old.run(lambda uow: uow.execute(
            "INSERT INTO events (event_id, event_type, verb, cloud, resource_type, resource_id, project_id, "
            "occurred_at, source, payload, content_hash, received_at) VALUES "
            "('f1', 'compute.instance.create.end', 'create', 'c1', 'instance', 'srv-1', 'p', "
            "'2026-03-01T00:00:00Z', 'collector', %s, 'h', '2026-03-01T00:00:00Z')",
            ['{"note": 1.5, "size": {"flavor_name": "m", "vcpus": 2.0, "ram_mb": 2.5, "disk_gb": null}}']))
        # What that release's refresh folded (today's refresh needs today's schema): the float size.
        old.run(lambda uow: uow.execute(
            "INSERT INTO current_resources (cloud, resource_type, resource_id, status, project_id, size, created_at, "
            "deleted_at, last_event_at, last_seq, event_count) VALUES ('c1', 'instance', 'srv-1', 'live', 'p', %s, "
            "'2026-03-01T00:00:00Z', NULL, '2026-03-01T00:00:00Z', 1, 1)", [_OLD_FOLDED_SIZE]))
        old.run(lambda uow: uow.execute(
            "INSERT INTO resource_intervals (cloud, resource_type, resource_id, interval_no, lifecycle_no, project_id, "
            "size, start_at, end_at) VALUES ('c1', 'instance', 'srv-1', 0, 0, 'p', %s, '2026-03-01T00:00:00Z', NULL)",
            [_OLD_FOLDED_SIZE]))
        old.run(lambda uow: uow.execute("UPDATE projection_state SET watermark = 1"))
        old.migrate()
        assert _size_of(old, "f1") == {"flavor_name": "m", "vcpus": 2, "ram_mb": 2.5, "disk_gb": None}
        assert type(_size_of(old, "f1")["vcpus"]) is int
        payload = old.query("SELECT payload FROM events WHERE event_id = 'f1'")[0][0]
        assert (json.loads(payload) if isinstance(payload, str) else payload)["note"] == 1.5
        assert old.query("SELECT watermark FROM projection_state")[0][0] == 0  # refolded from the rewritten event
        projection.refresh(old)
        sizes = old.query("SELECT size FROM resource_intervals WHERE resource_id = 'srv-1'")
        assert len(sizes) == 1  # the old fold's interval was replaced
        vcpus = (json.loads(sizes[0][0]) if isinstance(sizes[0][0], str) else sizes[0][0])["vcpus"]
        assert vcpus == 2 and type(vcpus) is int


def test_reconciliation_books_a_float_size_as_integers_and_converges(store, registry) -> None:
    from tally_pipeline.fakes.static_view import StaticView
    from tally_pipeline.providers.simulated.adapter import SimulatedAdapter
    from tally_pipeline.providers.simulated.platform import PlatformRecord
    from tally_pipeline.services.reconciliation import run_sync

    now = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
    created = datetime(2026, 3, 1, tzinfo=UTC)
    record = PlatformRecord("volume", "v-float", "p1", {"gb": 10.0, "volume_type": None}, "available", None,
                            created, created, None, "v-float")
    view = StaticView.of([record])
    ingestor = Ingestor(store, registry)

    def sync(run_key: str):
        adapter = SimulatedAdapter(view, "c1", resource_types=("volume",))
        return run_sync(store, ingestor, "c1", adapter, settle_window=300, mass_delete_guard=0.5, now=now,
                        run_key=run_key)

    assert sync("tick:1").created == 1
    (payload,) = [p for (p,) in store.query("SELECT payload FROM events WHERE resource_id = 'v-float'")]
    size = (json.loads(payload) if isinstance(payload, str) else payload)["size"]
    assert type(size["gb"]) is int and size["gb"] == 10
    again = sync("tick:2")
    assert (again.created, again.updated) == (0, 0)  # 10.0 on the platform is the 10 stored: nothing to correct
