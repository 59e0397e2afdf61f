"""Each envelope rule (docs/architecture.md, «The event envelope»), broken one at a time, gives its reason and names the field."""

from datetime import UTC, datetime

import pytest

from tally_pipeline.core.envelope import MAX_PAYLOAD_BYTES, EventRecord, Rejection, validate_event
from tally_pipeline_tests.events import event


def rejected(item, registry) -> Rejection:
    result = validate_event(item, registry)
    assert isinstance(result, Rejection), f"expected a rejection, got {result}"
    return result


def test_valid_event_is_normalised_to_utc(registry) -> None:
    record = validate_event(event(occurred_at="2026-03-01T14:30:00.123456789+02:30"), registry)
    assert isinstance(record, EventRecord)
    assert record.occurred_at == datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
    assert record.verb == "create"
    assert record.source == "collector"


def test_same_instant_in_other_offset_has_same_content_hash(registry) -> None:
    a = validate_event(event(event_id="x", resource_id="r", occurred_at="2026-03-01T12:00:00Z"), registry)
    b = validate_event(event(event_id="x", resource_id="r", occurred_at="2026-03-01T13:00:00+01:00"), registry)
    c = validate_event(event(event_id="x", resource_id="r2", occurred_at="2026-03-01T12:00:00Z"), registry)
    assert a.content_hash == b.content_hash != c.content_hash


@pytest.mark.parametrize(
    ("change", "reason", "field"),
    [
        ({"event_id": ""}, "invalid_field", "event_id"),
        ({"event_id": "x" * 201}, "invalid_field", "event_id"),
        ({"event_id": 17}, "invalid_field", "event_id"),
        ({"event_type": "Compute.Instance"}, "invalid_field", "event_type"),
        ({"event_type": "compute..create"}, "invalid_field", "event_type"),
        ({"cloud": "has space"}, "invalid_field", "cloud"),
        ({"cloud": "x" * 64}, "invalid_field", "cloud"),
        ({"resource_type": "spaceship"}, "unknown_resource_type", "resource_type"),
        ({"resource_id": ""}, "invalid_field", "resource_id"),
        ({"resource_id": "r" * 256}, "invalid_field", "resource_id"),
        ({"project_id": 5}, "invalid_field", "project_id"),
        ({"occurred_at": "2026-03-01T12:00:00"}, "invalid_timestamp", "occurred_at"),
        ({"occurred_at": "2026-13-01T12:00:00Z"}, "invalid_timestamp", "occurred_at"),
        ({"occurred_at": "yesterday"}, "invalid_timestamp", "occurred_at"),
        ({"occurred_at": 1767225600}, "invalid_timestamp", "occurred_at"),
        ({"source": "someone"}, "invalid_field", "source"),
        ({"payload": [1, 2]}, "invalid_payload", "payload"),
        ({"event_id": None}, "missing_field", "event_id"),
        ({"occurred_at": None}, "missing_field", "occurred_at"),
        ({"colour": "blue"}, "unknown_field", "colour"),
        ({"project_id": None}, "missing_project_id", "project_id"),
        ({"payload": {}}, "missing_size", "payload.size"),
        ({"payload": {"size": {"flavor_name": "m1", "vcpus": "two", "ram_mb": 1, "disk_gb": 1}}}, "size_schema", "vcpus"),
        ({"payload": {"size": {"flavor_name": "m1", "vcpus": 2, "ram_mb": 1}}}, "size_schema", "disk_gb"),
        ({"payload": {"size": {"flavor_name": "m1", "vcpus": 2, "ram_mb": 1, "disk_gb": 1, "gpu": 1}}}, "size_schema", "gpu"),
        ({"resource_id": "a\x00b"}, "invalid_field", "NUL"),
        ({"payload": {"size": {"flavor_name": "m1", "vcpus": 2, "ram_mb": 1, "disk_gb": 1}, "note": "a\x00"}}, "invalid_field", "NUL"),
        ({"payload": {"size": {"flavor_name": "m1", "vcpus": 2, "ram_mb": 1, "disk_gb": 1}, "big": 2**70}}, "number_out_of_range", "payload.big"),
        ({"payload": {"size": {"flavor_name": "m1", "vcpus": 2, "ram_mb": 1, "disk_gb": 1}, "pad": "x" * MAX_PAYLOAD_BYTES}}, "payload_too_large", "payload"),
        ({"payload": {"size": {"flavor_name": "m1", "vcpus": 2, "ram_mb": 1, "disk_gb": 1}, "status": 4}}, "invalid_payload", "payload.status"),
        ({"payload": {"size": {"flavor_name": "m1", "vcpus": 2, "ram_mb": 1, "disk_gb": 1}, "status": {"vm": "x"}}}, "invalid_payload", "payload.status"),
        ({"payload": {"size": {"flavor_name": "m1", "vcpus": 2, "ram_mb": 1, "disk_gb": 1}, "status": "s" * 65}}, "invalid_payload", "payload.status"),
    ],
)
def test_broken_rule_gives_reason_naming_the_field(registry, change, reason, field) -> None:
    result = rejected(event(**change), registry)
    assert result.reason == reason
    assert result.message.startswith(f"{reason}:") or reason == "invalid_item"
    assert field in result.message


def test_size_schema_message_names_field_and_problem(registry) -> None:
    result = rejected(event(payload={"size": {"flavor_name": "m1", "vcpus": "two", "ram_mb": 1, "disk_gb": 1}}), registry)
    assert result.message == "size_schema: vcpus: 'two' is not of type 'integer'"


@pytest.mark.parametrize("item", [5, "text", None, [1], True])
def test_non_object_item(registry, item) -> None:
    assert rejected(item, registry).reason == "invalid_item"


def test_update_needs_size_but_not_project(registry) -> None:
    ok = validate_event(event(event_type="compute.instance.resize.confirm.end", project_id=None), registry)
    assert isinstance(ok, EventRecord) and ok.verb == "update"
    bad = rejected(event(event_type="compute.instance.resize.confirm.end", payload={}), registry)
    assert bad.reason == "missing_size"


def test_delete_and_note_need_neither_size_nor_project(registry) -> None:
    for event_type, verb in (("compute.instance.delete.end", "delete"), ("compute.instance.create.start", "note")):
        ok = validate_event(event(event_type=event_type, project_id=None, payload={}), registry)
        assert isinstance(ok, EventRecord) and ok.verb == verb


def test_size_present_on_delete_is_still_checked(registry) -> None:
    bad = rejected(event(event_type="volume.delete.end", resource_type="volume", payload={"size": {"gb": -1}}), registry)
    assert bad.reason == "size_schema"
