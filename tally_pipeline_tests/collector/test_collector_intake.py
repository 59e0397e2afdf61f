"""One bus message, one outcome: an event, ignored with a code, or rejected with a reason (no broker here).

The bodies are what oslo.messaging's notifiers put on the wire: the ``messagingv2`` envelope around
an official sample, or (the old ``messaging`` driver) the sample itself.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tally_pipeline.collector.intake import (
    EXCERPT_BYTES,
    Ignored,
    Mapped,
    Rejected,
    raw_text,
    read_message,
)
from tally_pipeline.providers.openstack.notifications import map_notification
from tally_pipeline_tests.providers.openstack.notification_samples import sample, versioned_sample


def envelope(message: dict[str, Any]) -> bytes:
    """What oslo.messaging's messagingv2 driver publishes (its serialize_msg)."""
    return json.dumps({"oslo.version": "2.0", "oslo.message": json.dumps(message)}).encode()


def read(body: bytes) -> Any:
    return read_message(body, cloud="c1")


def test_an_enveloped_sample_maps_to_the_same_event_as_the_mapping_gives() -> None:
    message = sample("cinder/volume.create.end.json")
    outcome = read(envelope(message))
    assert isinstance(outcome, Mapped)
    assert json.loads(outcome.body) == map_notification(message, cloud="c1")
    assert outcome.event_id == json.loads(outcome.body)["event_id"]
    assert outcome.size == len(outcome.body.encode("utf-8"))


def test_a_message_without_envelope_is_read_too() -> None:
    message = versioned_sample("instance-create-end", message_id="m-1", timestamp="2012-10-29 13:45:00.000001")
    outcome = read(json.dumps(message).encode())
    assert isinstance(outcome, Mapped) and json.loads(outcome.body) == map_notification(message, cloud="c1")


@pytest.mark.parametrize(("name", "code"), [
    ("cinder/volume.exists.json", "audit"),
    ("nova/legacy/compute.instance.delete.start.json", "step"),
    ("neutron/network.create.end.json", "no_usage_change"),
])
def test_notifications_that_change_no_usage_are_ignored_by_code(name: str, code: str) -> None:
    assert read(envelope(sample(name))) == Ignored(code)


def test_a_failed_action_is_ignored() -> None:
    message = {**sample("cinder/volume.create.end.json"), "priority": "ERROR"}
    assert read(envelope(message)) == Ignored("error_priority")


@pytest.mark.parametrize(("body", "says"), [
    (b"not json {", "the message is not JSON"),
    (b"\xff\xfe garbage", "the message is not JSON"),
    (b'["a", "list"]', "the message is a JSON list, not an object"),
    (b'"a string"', "the message is a JSON str, not an object"),
    (json.dumps({"oslo.version": "2.0", "oslo.message": "{broken"}).encode(), "the envelope's oslo.message is not JSON"),
    (json.dumps({"oslo.version": "2.0", "oslo.message": {"event_type": "x"}}).encode(),
     "the envelope's oslo.message is not a JSON text"),
    (json.dumps({"oslo.version": "2.0", "oslo.message": "[1]"}).encode(), "oslo.message is a JSON list"),
    (json.dumps({"oslo.version": "3.0", "oslo.message": "{}"}).encode(), "envelope version '3.0' is not 2.x"),
    (b'{"event_type": "volume.create.end", "payload": NaN}', "is not JSON"),
])
def test_what_is_no_notification_is_rejected_as_unparseable(body: bytes, says: str) -> None:
    outcome = read(body)
    assert isinstance(outcome, Rejected) and outcome.reason == "unparseable"
    assert says in outcome.message


def test_unknown_and_invalid_notifications_are_rejected_with_the_mappings_reason() -> None:
    unknown = read(envelope({"message_id": "m-2", "event_type": "telemetry.polling", "priority": "INFO",
                             "payload": {}, "timestamp": "2026-01-01 00:00:00"}))
    assert unknown == Rejected("unknown_type", "unknown event type 'telemetry.polling'", "m-2")
    broken = sample("cinder/volume.create.end.json")
    broken["payload"]["size"] = "big"
    invalid = read(envelope(broken))
    assert isinstance(invalid, Rejected) and invalid.reason == "invalid" and "size" in invalid.message
    assert invalid.message_id == broken["message_id"]
    untyped = read(envelope({"message_id": "m-3", "priority": None, "payload": {}}))
    assert isinstance(untyped, Rejected) and untyped.reason == "invalid"


def test_a_mapping_that_fails_costs_that_message_only(monkeypatch: pytest.MonkeyPatch) -> None:
    # mapping_error is kept for a bug of ours: the mapping raising on a message it should have answered.
    def broken_mapping(*_args: Any, **_kwargs: Any) -> Any:
        raise KeyError("a bug")

    monkeypatch.setattr("tally_pipeline.collector.intake.map_notification", broken_mapping)
    outcome = read(envelope(sample("cinder/volume.create.end.json")))
    assert isinstance(outcome, Rejected) and outcome.reason == "mapping_error"
    assert "KeyError" in outcome.message


@pytest.mark.parametrize("name,old,new,reason,says", [
    # 1e400 is JSON, read as infinity: the sender's number, out of range (it was mapping_error)
    ("cinder/volume.create.end.json", '"size": 1,', '"size": 1e400,', "number_out_of_range", "size"),
    ("cinder/volume.create.end.json", '"size": 1,', '"size": -1e400,', "number_out_of_range", "size"),
    ("cinder/volume.create.end.json", '"size": 1,', '"size": 123456789012345678901234567890,',
     "number_out_of_range", "64-bit"),
    ("glance/image.upload.json", '"size": 19}', '"size": 123456789012345678901234567890}',
     "number_out_of_range", "64-bit"),
    # a lone surrogate is valid JSON text (an escape) but no UTF-8: in a field the mapping reads ...
    ("cinder/volume.create.end.json", "cccccccc-cccc", "\\ud800cccc-cccc", "invalid_text", "volume_id"),
    ("cinder/volume.create.end.json", '"created_at": "2014', '"created_at": "\\udfff2014', "invalid_text",
     "created_at"),
    # ... or in one it copies as it came
    ("cinder/volume.create.end.json", '"publisher_id": "volumes', '"publisher_id": "\\ud800volumes',
     "invalid_text", "publisher_id"),
])
def test_a_bad_value_is_rejected_for_what_is_wrong_with_it(name: str, old: str, new: str, reason: str,
                                                           says: str) -> None:
    text = json.dumps(sample(name))
    assert old in text
    for body in (json.dumps({"oslo.version": "2.0", "oslo.message": text.replace(old, new, 1)}).encode(),
                 text.replace(old, new, 1).encode()):
        outcome = read(body)
        assert isinstance(outcome, Rejected) and outcome.reason == reason, outcome
        assert says in outcome.message and outcome.message_id == sample(name)["message_id"]
        outcome.message.encode("utf-8")  # the message itself is text the rejected log can hold


def test_the_raw_text_keeps_undecodable_bytes_visible_and_cuts_a_huge_body() -> None:
    assert raw_text(b"ok \xff") == "ok \\xff"
    huge = raw_text(b"x" * (EXCERPT_BYTES + 10))
    assert huge == "x" * EXCERPT_BYTES + f"… [{EXCERPT_BYTES + 10} bytes in all; the first {EXCERPT_BYTES} bytes of its text kept]"
    assert raw_text(b"a\x00b") == "a\\x00b"  # a NUL shown as an escape: SQLite's text functions stop at one


def test_the_buffered_text_is_what_the_collector_client_writes() -> None:
    from tally_pipeline.collector.protocol import encode_event

    for name in ("cinder/volume.create.end.json", "glance/image.upload.json", "octavia/octavia.loadbalancer.create.end.json"):
        message = sample(name)
        message["publisher_id"] = "host-naïve-☃-𝄞"  # kept in the event; beyond ASCII, beyond the BMP
        outcome = read(envelope(message))
        assert isinstance(outcome, Mapped)
        assert (outcome.event_id, outcome.body) == encode_event(map_notification(message, cloud="c1"))
