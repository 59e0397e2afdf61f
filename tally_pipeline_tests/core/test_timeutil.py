"""RFC 3339 parsing: the shortcut for plain UTC strings gives exactly what the full parser gives."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tally_pipeline.core.timeutil import TimestampError, parse_rfc3339, parse_rfc3339_iso

_DIGITS = "0123456789"


def _digits(n: int) -> st.SearchStrategy[str]:
    return st.text(st.sampled_from(_DIGITS), min_size=n, max_size=n)


def _mostly(valid: st.SearchStrategy[str], odd: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """Usually a valid piece, sometimes an odd one: a string broken in one place at a time."""
    return st.integers(0, 5).flatmap(lambda n: odd if n == 0 else valid)


@st.composite
def timestamps(draw: st.DrawFn) -> str:
    """Strings around the plain UTC shape: other offsets, fractions, separators, impossible dates."""
    year = draw(_mostly(st.sampled_from(["2026", "0001", "9999", "1970"]), st.sampled_from(["0000", "２０２６", "26"])))
    month = draw(_mostly(st.integers(1, 12).map("{:02d}".format), st.sampled_from(["13", "00", "1"])))
    day = draw(_mostly(st.integers(1, 28).map("{:02d}".format), st.sampled_from(["29", "30", "31", "32", "00"])))
    clock = draw(_mostly(
        st.tuples(st.integers(0, 23), st.integers(0, 59), st.integers(0, 59)).map("{0[0]:02d}:{0[1]:02d}:{0[2]:02d}".format),
        st.sampled_from(["24:00:00", "23:60:00", "23:59:60", "1:00:00"]),
    ))
    separator = draw(_mostly(st.just("T"), st.sampled_from(["t", " ", "_"])))
    fraction = draw(_mostly(
        st.one_of(st.just(""), st.integers(1, 9).flatmap(_digits).map(lambda d: "." + d)),
        st.sampled_from([".", ".１", ".1234567890"]),
    ))
    offset = draw(_mostly(
        st.sampled_from(["Z", "+00:00"]),
        st.sampled_from(["z", "-00:00", "+01:00", "-12:30", "+14:00", "", "Z\n", "+0000", "+00:00:00"]),
    ))
    return f"{year}-{month}-{day}{separator}{clock}{fraction}{offset}"


def _reference(value: str) -> tuple[datetime, str] | str:
    try:
        parsed = parse_rfc3339(value)
    except TimestampError as exc:
        return str(exc)
    return parsed, parsed.isoformat()


def _shortcut(value: str) -> tuple[datetime, str] | str:
    try:
        return parse_rfc3339_iso(value)
    except TimestampError as exc:
        return str(exc)


@pytest.mark.slow
@settings(max_examples=2000, deadline=None)
@given(st.one_of(timestamps(), st.text(max_size=40)))
@example("2026-03-01T12:00:00.000000Z")
@example("2026-03-01T12:00:00.000001+00:00")
@example("2026-03-01T12:00:00.5Z")
@example("0001-01-01T00:00:00Z")
@example("9999-12-31T23:59:59.999999Z")
def test_the_shortcut_agrees_with_the_parser(value: str) -> None:
    got, want = _shortcut(value), _reference(value)
    assert got == want
    if isinstance(got, tuple):
        assert got[0].tzinfo is UTC and got[0].utcoffset() == want[0].utcoffset()


@pytest.mark.parametrize(
    ("value", "iso"),
    [
        ("2026-03-01T12:00:00Z", "2026-03-01T12:00:00+00:00"),
        ("2026-03-01T12:00:00.000Z", "2026-03-01T12:00:00+00:00"),
        ("2026-03-01T12:00:00.25Z", "2026-03-01T12:00:00.250000+00:00"),
        ("2026-03-01T12:00:00.000100+00:00", "2026-03-01T12:00:00.000100+00:00"),
        ("2026-03-01T13:00:00+01:00", "2026-03-01T12:00:00+00:00"),
    ],
)
def test_iso_text_of_the_instant(value: str, iso: str) -> None:
    assert parse_rfc3339_iso(value)[1] == iso
