"""RFC 3339 parsing: the shortcut for plain UTC strings gives exactly what the full parser gives."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

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


# RFC 3339 exactly (issue #26): each timestamp is built from its components and compared with the
# instant those components name, computed here with plain datetime arithmetic: the reference parser.

@st.composite
def components(draw: st.DrawFn) -> tuple[str, datetime | None]:
    """A timestamp string and the UTC instant it names (None when RFC 3339 refuses it)."""
    year, month, day = draw(st.integers(1, 9999)), draw(st.integers(1, 12)), draw(st.integers(1, 31))
    hour, minute = draw(st.integers(0, 23)), draw(st.integers(0, 59))
    second = draw(st.sampled_from([0, 59, 60]) | st.integers(0, 60))
    digits = draw(st.one_of(st.just(""), st.integers(1, 9).flatmap(_digits)))
    sign = draw(st.sampled_from(["Z", "z", "+", "-"]))
    offset_hours = draw(st.integers(0, 23) | st.integers(24, 99))
    offset_minutes = draw(st.integers(0, 59) | st.integers(60, 99))
    separator = draw(st.sampled_from(["T", "t", " "]))
    text = f"{year:04d}-{month:02d}-{day:02d}{separator}{hour:02d}:{minute:02d}:{second:02d}"
    text += f".{digits}" if digits else ""
    text += sign if sign in "Zz" else f"{sign}{offset_hours:02d}:{offset_minutes:02d}"
    if sign in "+-" and (offset_hours > 23 or offset_minutes > 59):
        return text, None
    offset = timedelta(0) if sign in "Zz" else timedelta(hours=offset_hours, minutes=offset_minutes)
    if sign == "-":
        offset = -offset
    try:
        local = datetime(year, month, day, hour, minute, min(second, 59), tzinfo=UTC)
    except ValueError:  # no such day in that month
        return text, None
    micro = 999_999 if second == 60 else int(digits.ljust(6, "0")[:6])
    try:
        instant = local - offset + timedelta(microseconds=micro)
    except OverflowError:
        return text, None
    if second == 60 and (instant.hour, instant.minute) != (23, 59):
        return text, None  # a leap second is inserted only at 23:59:60 UTC
    return text, instant


@pytest.mark.slow
@settings(max_examples=3000, deadline=None)
@given(components())
@example(("2026-03-01T12:00:00+00:99", None))
@example(("2016-12-31T23:59:60Z", datetime(2016, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)))
@example(("2016-12-31T18:59:60-05:00", datetime(2016, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)))
@example(("2016-12-31T12:00:60Z", None))
def test_rfc3339_exactly_as_its_components_say(case: tuple[str, datetime | None]) -> None:
    text, instant = case
    if instant is None:
        with pytest.raises(TimestampError):
            parse_rfc3339(text)
        with pytest.raises(TimestampError):
            parse_rfc3339_iso(text)
        return
    assert parse_rfc3339(text) == instant
    assert parse_rfc3339_iso(text) == (instant, instant.isoformat())


@pytest.mark.parametrize("value", ["２０２６-03-01T12:00:00Z", "2026-03-01T12:00:00Z\n", "2026-03-01T12:00:00+0000"])
def test_only_ascii_digits_and_the_exact_shape(value: str) -> None:
    with pytest.raises(TimestampError):
        parse_rfc3339(value)


def test_the_refusals_say_why() -> None:
    with pytest.raises(TimestampError, match="offset outside -23:59"):
        parse_rfc3339("2026-03-01T12:00:00+00:99")
    with pytest.raises(TimestampError, match="leap second"):
        parse_rfc3339("2026-03-01T12:00:60Z")
