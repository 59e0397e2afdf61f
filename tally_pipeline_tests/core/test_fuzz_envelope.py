"""``validate_event`` under hostile input: it never raises, every refusal has a known reason, and whatever
it accepts can be stored as is (UTF-8, no NUL, finite numbers within 64 bits, canonical JSON)."""

from __future__ import annotations

import json
import math
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tally_pipeline.core.envelope import EventRecord, Rejection, validate_event
from tally_pipeline.schemas import default_registry
from tally_pipeline_tests.collector_api import volume_event
from tally_pipeline_tests.hostile import OUT_OF_RANGE, almost_events, json_values, nested

pytestmark = pytest.mark.slow  # a real process or a long property search per test

REGISTRY = default_registry()
ITEM_REASONS = {
    "invalid_item", "unknown_field", "missing_field", "invalid_field", "invalid_timestamp", "unknown_resource_type",
    "missing_project_id", "missing_size", "size_schema", "invalid_payload", "payload_too_large",
    "number_out_of_range", "invalid_text",
}


def _as_parsed(value: Any) -> Any:
    """What a JSON parser hands the validator: the out-of-range marker becomes the float 1e400 (infinity)."""
    if value == OUT_OF_RANGE:
        return math.inf
    if isinstance(value, dict):
        return {k: _as_parsed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_as_parsed(v) for v in value]
    return value


def _storable(record: EventRecord) -> None:
    for text in (record.event_id, record.event_type, record.cloud, record.resource_type, record.resource_id,
                 record.project_id or "", record.source, record.payload_json):
        text.encode("utf-8")  # a lone surrogate would raise here
        assert "\x00" not in text
    assert "\\u0000" not in record.payload_json
    assert orjson.loads(record.payload_json) == json.loads(record.payload_json)
    assert json.loads(record.payload_json) == record.payload  # nothing rounded or replaced by null
    assert len(record.content_hash) == 32 and int(record.content_hash, 16) >= 0
    assert record.occurred_at.utcoffset().total_seconds() == 0


def _check(item: Any) -> EventRecord | Rejection:
    result = validate_event(item, REGISTRY)
    if isinstance(result, Rejection):
        assert result.reason in ITEM_REASONS, result
        assert isinstance(result.message, str) and result.message
        result.message.encode("utf-8")  # messages are stored and answered: they must be UTF-8
    else:
        assert isinstance(result, EventRecord)
        _storable(result)
    return result


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_any_json_value_is_either_a_storable_record_or_a_known_rejection(value: Any) -> None:
    result = _check(_as_parsed(value))
    if not isinstance(value, dict):
        assert isinstance(result, Rejection) and result.reason == "invalid_item"


@settings(max_examples=200, deadline=None)
@given(almost_events("fuzz"))
def test_an_event_broken_in_one_place_is_either_storable_or_a_known_rejection(event: dict[str, Any]) -> None:
    result = _check(_as_parsed(event))
    if isinstance(result, EventRecord):
        assert result.event_id == event["event_id"] and result.resource_id == event["resource_id"]


@pytest.mark.parametrize(
    ("where", "value", "reason"),
    [
        ("payload", {"size": {"gb": 1}, "n": 2**64}, "number_out_of_range"),  # orjson cannot hold it: never round
        ("payload", {"size": {"gb": 1}, "n": math.inf}, "number_out_of_range"),  # 1e400 parses as infinity
        ("payload", {"size": {"gb": 1}, "n": [math.nan]}, "invalid_payload"),
        ("payload", {"size": {"gb": 2**70}}, "size_schema"),
        ("payload", {"size": {"gb": 1}, "deep": nested(300)}, "invalid_payload"),
        ("payload", {"size": {"gb": 1}, "s": "\ud800"}, "invalid_text"),
        ("payload", {"size": {"gb": 1}, "k\ud800": 1}, "invalid_text"),
        ("event_id", "\ud800", "invalid_text"),
        ("resource_id", "r\udfff", "invalid_text"),
        ("resource_id", "\x00", "invalid_field"),
        ("occurred_at", "0001-01-01T00:00:00+01:00", "invalid_timestamp"),  # before year 1 once in UTC
        ("occurred_at", "9999-12-31T23:59:59-01:00", "invalid_timestamp"),  # after year 9999 once in UTC
    ],
)
def test_values_nothing_can_store_are_refused_with_a_reason(where: str, value: Any, reason: str) -> None:
    result = _check({**volume_event(1), where: value})
    assert isinstance(result, Rejection) and result.reason == reason, result


@pytest.mark.parametrize("value", [-0.0, 2**64 - 1, -(2**63), 1e308, 5e-324, "\u202e\u0645", "\U0001f600"])
def test_values_at_the_edges_that_fit_are_stored_exactly(value: Any) -> None:
    record = _check({**volume_event(1), "payload": {"size": {"gb": 1}, "edge": value}})
    assert isinstance(record, EventRecord)
    stored = json.loads(record.payload_json)["edge"]
    assert stored == value and type(stored) is type(value)
    if isinstance(value, float):
        assert math.copysign(1, stored) == math.copysign(1, value)


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.sampled_from(["gb", "volume_type", "x"]), json_values, max_size=3))
def test_the_size_check_never_raises_and_remembers_only_valid_sizes(size: dict[str, Any]) -> None:
    volume = REGISTRY["volume"]
    first = volume.size_error(_as_parsed(size))
    assert first is None or isinstance(first, str)
    assert volume.size_error(_as_parsed(size)) == first  # the cache of valid sizes agrees with a fresh check
