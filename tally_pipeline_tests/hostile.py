"""Hypothesis strategies for hostile input: any JSON, odd unicode, huge strings, numbers out of range, and
events that are valid but for one field.

``to_body`` writes a value as JSON the way a careless or malicious client might: lone surrogates as
``\\ud800`` escapes, NaN and infinities as bare literals, and ``OUT_OF_RANGE`` markers as ``1e400``.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

from tally_pipeline_tests.collector_api import volume_event

OUT_OF_RANGE = "\u2063out-of-range\u2063"  # written as the literal 1e400 by to_body

ODD_STRINGS = [
    "",
    "\x00",
    "a\x00b",
    "\ud800",
    "x\udfff",
    "\u202eevil\u202c",
    "\u0645\u0631\u062d\u0628\u0627",
    "\U0001d54f\U0001f600",
    "\ufeff",
    "\r\n\t",
    "'; DROP TABLE events; --",
    "%s",
    "?",
    "\\",
    '"',
    "../../etc/passwd",
    "x" * 300,
    "y" * 70_000,
]

odd_text = st.one_of(
    st.sampled_from(ODD_STRINGS),
    st.text(st.characters(exclude_categories=()), max_size=40),  # every code point, surrogates included
)

numbers = st.one_of(
    st.integers(),
    st.sampled_from([2**63, 2**64, 2**70, -(2**63) - 1, 10**30, -0.0, 0.0, 1e308, 5e-324]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.just(OUT_OF_RANGE),
)

scalars = st.one_of(st.none(), st.booleans(), numbers, odd_text)

json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(odd_text, inner, max_size=4),
    ),
    max_leaves=12,
)


def nested(depth: int, leaf: Any = 1) -> Any:
    """A value nested ``depth`` levels deep (alternating arrays and objects), built without recursion."""
    value = leaf
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


ENVELOPE_FIELDS = ("event_id", "event_type", "cloud", "resource_type", "resource_id", "project_id", "occurred_at",
                   "source", "payload")


@st.composite
def almost_events(draw: st.DrawFn, prefix: str) -> dict[str, Any]:
    """A valid volume event with a fresh id, sometimes with one field replaced, removed or added."""
    n = draw(st.integers(0, 10**9))
    event = volume_event(n, event_id=f"{prefix}-{n}")
    event["resource_id"] = draw(st.one_of(st.just(f"vol-{n}"), st.text(min_size=1, max_size=20)))
    change = draw(st.sampled_from(["none", "none", "replace", "remove", "add", "payload", "size"]))
    field = draw(st.sampled_from(ENVELOPE_FIELDS))
    if change == "replace":
        event[field] = draw(json_values)
    elif change == "remove":
        event.pop(field, None)
    elif change == "add":
        event[draw(odd_text)] = draw(json_values)
    elif change == "payload":
        event["payload"] = {"size": event["payload"]["size"], "extra": draw(json_values)}
    elif change == "size":
        event["payload"] = {"size": {"gb": draw(json_values), "volume_type": draw(odd_text)}}
    return event


def batches(prefix: str) -> st.SearchStrategy[list[Any]]:
    """Batches of events, near-events, any JSON, and repeats of earlier items (duplicates in one batch)."""
    item = st.one_of(almost_events(prefix), almost_events(prefix), json_values)
    return st.lists(item, max_size=12).flatmap(
        lambda items: st.lists(st.sampled_from(items), max_size=3).map(lambda repeats: items + repeats)
        if items else st.just(items)
    )


def to_body(value: Any) -> bytes:
    """The JSON text of ``value`` as a hostile client sends it (see the module docstring)."""
    text = json.dumps(value, ensure_ascii=True, allow_nan=True)
    return text.replace(json.dumps(OUT_OF_RANGE), "1e400").encode("ascii")
