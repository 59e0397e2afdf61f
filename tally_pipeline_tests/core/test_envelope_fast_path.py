"""The shortcut in ``validate_event`` (plain envelopes skip the pydantic model) changes no result.

``validate_event_reference`` is the rule itself; for any item, including envelopes that are valid
but for one edge (a length at its bound, a str subclass, a lone surrogate, an odd timestamp),
``validate_event`` must give an equal record or the very same rejection.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tally_pipeline.core.envelope import EventRecord, validate_event, validate_event_reference
from tally_pipeline.core.timeutil import parse_rfc3339
from tally_pipeline.schemas import default_registry
from tally_pipeline_tests.core.test_timeutil import timestamps
from tally_pipeline_tests.events import SIZES
from tally_pipeline_tests.hostile import almost_events, json_values, odd_text

pytestmark = pytest.mark.slow  # a real process or a long property search per test

REGISTRY = default_registry()


class StrSubclass(str):
    """The model converts a str subclass to str: the shortcut must leave it to the model."""


class DictSubclass(dict):
    """Likewise for a dict subclass."""


def _text(alphabet: str, min_size: int, max_size: int) -> st.SearchStrategy[str]:
    return st.text(st.sampled_from(alphabet), min_size=min_size, max_size=max_size)


def _around(bound: int, alphabet: str = "ab-é") -> st.SearchStrategy[str]:
    """Strings of length 0, 1 and near ``bound``."""
    return st.one_of(
        st.sampled_from(["", "x"]),
        st.integers(bound - 1, bound + 1).flatmap(lambda n: _text(alphabet, n, n)),
    )


_event_types = st.one_of(
    st.sampled_from([
        "compute.instance.create.end", "volume.delete.end", "sync.update", "compute.instance.create.start",
        "Compute.Instance", "compute..create", "compute.instance.create.end\n", ".x", "x.", "a_b-c.d",
    ]),
    _text("abc._-Z\n", 1, 12),
    st.integers(254, 256).map(lambda n: "a" * n),
)
_clouds = st.one_of(
    st.sampled_from(["region-one", "c1", "a.b_c-D", "has space", "c1\n", "é"]),
    _around(63, "aZ9_.-"),
)
_payloads = st.one_of(
    st.builds(lambda size, extra: {"size": size, **extra},
              st.sampled_from([dict(SIZES["instance"]), {"flavor_name": "m1", "vcpus": "two", "ram_mb": 1, "disk_gb": 1}]),
              st.dictionaries(odd_text, json_values, max_size=2)),
    st.just({}),
    st.builds(lambda: DictSubclass(size=dict(SIZES["instance"]))),
    st.just({StrSubclass("size"): dict(SIZES["instance"])}),
    st.just({"size": dict(SIZES["instance"]), 1: 2}),
    st.just({"size": dict(SIZES["instance"]), "\ud800": 1}),
    json_values,
)


def _base() -> dict[str, Any]:
    """A valid instance create event."""
    return {
        "event_id": "e-1",
        "event_type": "compute.instance.create.end",
        "cloud": "region-one",
        "resource_type": "instance",
        "resource_id": "r-1",
        "project_id": "proj-a",
        "occurred_at": "2026-03-01T12:00:00.25Z",
        "payload": {"size": dict(SIZES["instance"])},
    }


_absent: Any = object()
_odd_values = st.sampled_from([_absent, None, 17, 1.5, True, StrSubclass("x"), ["x"], {"x": 1}])

# For each field, values at and beyond its edges (``_absent`` removes the field).
_EDGES: dict[str, st.SearchStrategy[Any]] = {
    "event_id": st.one_of(_around(200), st.sampled_from(["\ud800x", "a\x00b", StrSubclass("e-1")])),
    "event_type": st.one_of(_event_types, st.just(StrSubclass("sync.update"))),
    "cloud": st.one_of(_clouds, st.just(StrSubclass("c1"))),
    "resource_type": st.sampled_from(["instance", "volume", "spaceship", "", "i" * 64, StrSubclass("instance")]),
    "resource_id": st.one_of(_around(255), st.just("r\x00")),
    "project_id": st.one_of(_around(255), st.just(StrSubclass("p"))),
    "occurred_at": st.one_of(
        timestamps(), st.just("2026-03-01T12:00:00Z" + "0" * 60), st.just(StrSubclass("2026-03-01T12:00:00Z"))),
    "source": st.sampled_from(["collector", "reconciliation", "someone", "Collector", StrSubclass("collector")]),
    "payload": _payloads,
}


@st.composite
def envelopes(draw: st.DrawFn) -> Any:
    """A valid instance event with one field (sometimes two) pushed to an edge, removed or made odd."""
    item = _base()
    for _ in range(draw(st.sampled_from([1, 1, 1, 2, 0]))):
        field = draw(st.sampled_from(sorted(_EDGES)))
        item[field] = draw(st.one_of(_EDGES[field], _odd_values) if draw(st.integers(0, 4)) == 0 else _EDGES[field])
    if draw(st.integers(0, 9)) == 0:
        item[draw(odd_text)] = draw(json_values)
    item = {k: v for k, v in item.items() if v is not _absent}
    if draw(st.integers(0, 9)) == 0:
        return DictSubclass(item)
    return item


def _same_result(item: Any) -> None:
    got = validate_event(item, REGISTRY)
    want = validate_event_reference(item, REGISTRY)
    assert got == want
    if isinstance(got, EventRecord):
        assert isinstance(want, EventRecord)
        for name in EventRecord.__slots__:  # equal is not enough: the same types too (no str subclass)
            assert type(getattr(got, name)) is type(getattr(want, name)), name
        assert [type(k) for k in got.payload] == [type(k) for k in want.payload]
        assert got.occurred_at_iso() == want.occurred_at_iso() == got.occurred_at.isoformat()
        assert got._occurred_at_text == want._occurred_at_text == got.occurred_at.isoformat()  # made, not redone
        if isinstance(item.get("payload"), dict):
            assert got.payload is not item["payload"]  # a copy, as the model makes


_BOUNDS = [
    ("event_id", "x" * 200), ("event_id", "x" * 201), ("event_id", ""), ("event_id", "é" * 200),
    ("event_type", "a" * 255), ("event_type", "a" * 256), ("event_type", "a.b\n"), ("event_type", "a..b"),
    ("cloud", "c" * 63), ("cloud", "c" * 64), ("cloud", ""), ("cloud", "c1\n"), ("cloud", "a b"), ("cloud", "é"),
    ("resource_type", ""), ("resource_type", "volume"),
    ("resource_id", "r" * 255), ("resource_id", "r" * 256), ("resource_id", ""),
    ("project_id", "p" * 255), ("project_id", "p" * 256), ("project_id", ""), ("project_id", None),
    ("occurred_at", "2026-03-01T12:00:00+00:00"), ("occurred_at", "2026-03-01T12:00:00.000001Z"),
    ("occurred_at", "2026-03-01T12:00:00.1234567Z"), ("occurred_at", "2026-03-01T12:00:00-00:00"),
    ("occurred_at", "2026-02-29T12:00:00Z"), ("occurred_at", "2026-03-01t12:00:00z"),
    ("source", "reconciliation"), ("source", "someone"), ("source", StrSubclass("collector")),
    ("payload", {}), ("payload", DictSubclass(size=dict(SIZES["instance"]))), ("payload", {StrSubclass("size"): SIZES["instance"]}),
    ("payload", {"size": SIZES["instance"], "\ud800": 1}), ("payload", {"size": SIZES["instance"], 1: 1}),
    ("event_id", StrSubclass("e-1")), ("cloud", StrSubclass("c")), ("resource_id", StrSubclass("r")), ("event_type", StrSubclass("sync.update")),
]


@pytest.mark.parametrize(("field", "value"), _BOUNDS)
def test_each_bound_gets_the_reference_result(field: str, value: Any) -> None:
    _same_result({**_base(), field: value})
    _same_result({k: v for k, v in _base().items() if k != field})
    _same_result(DictSubclass({**_base(), field: value}))


@settings(max_examples=1500, deadline=None)
@given(envelopes())
@example({"event_id": "e", "event_type": "volume.delete.end", "cloud": "c", "resource_type": "volume",
          "resource_id": "r", "occurred_at": "2026-03-01T12:00:00.000Z"})
@example({"event_id": "e", "event_type": "volume.delete.end", "cloud": "c", "resource_type": "volume",
          "resource_id": "r", "occurred_at": "2026-03-01T12:00:00.5+00:00", "source": "reconciliation"})
def test_edge_envelopes_get_the_reference_result(item: Any) -> None:
    _same_result(item)


@settings(max_examples=300, deadline=None)
@given(st.one_of(json_values, almost_events("fast")))
def test_any_item_gets_the_reference_result(item: Any) -> None:
    _same_result(item)


@settings(max_examples=500, deadline=None)
@given(timestamps())
def test_the_record_keeps_the_isoformat_its_hash_is_made_of(occurred_at: str) -> None:
    item = {"event_id": "e", "event_type": "volume.delete.end", "cloud": "c", "resource_type": "volume",
            "resource_id": "r", "occurred_at": occurred_at}
    _same_result(item)
    record = validate_event(item, REGISTRY)
    if isinstance(record, EventRecord):
        assert record.occurred_at == parse_rfc3339(occurred_at)


def test_the_kept_iso_text_follows_a_replaced_instant() -> None:
    record = validate_event(_base(), REGISTRY)
    assert isinstance(record, EventRecord)
    assert record.occurred_at_iso() == "2026-03-01T12:00:00.250000+00:00"
    record.occurred_at = datetime(2020, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert record.occurred_at_iso() == "2020-01-02T03:04:05+00:00"
