"""RFC 3339 timestamps: parsed strictly, always carried as aware UTC datetimes."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

from tally_pipeline.core.errors import InputError

# RFC 3339 §5.6 exactly, in ASCII digits (``\d`` would take any script's digits). The separator may be
# "T", "t" or a space (§5.6's note), the offset "Z", "z" or ±HH:MM.
_RFC3339 = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt ]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,9}))?"
    r"(?:[Zz]|([+-])([0-9]{2}):([0-9]{2}))"
)
_NO_OFFSET = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?")

# The shape nearly every collector sends (UTC, "T", at most microseconds). It is a strict subset of
# _RFC3339 in ASCII digits only, so anything it admits the full parser reads the same way.
_PLAIN_UTC = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.([0-9]{1,6}))?(?:Z|\+00:00)")


class TimestampError(InputError, ValueError):
    """A string that is not an RFC 3339 timestamp with an offset."""


def parse_rfc3339(value: str) -> datetime:
    """Parse an RFC 3339 timestamp that carries an offset, returning it in UTC.

    Sub-microsecond digits are truncated (the stores keep microseconds). An offset's hours run to 23
    and its minutes to 59 (``+00:99`` is refused, not read as another instant). A leap second
    (second 60, which occurs only at 23:59:60 UTC) is taken as 23:59:59.999999 UTC: Python's
    datetime, like the stores, has no 61st second, and that is the last instant before the next day.
    """
    match = _RFC3339.fullmatch(value)
    if match is None:
        if _NO_OFFSET.fullmatch(value):
            raise TimestampError(f"{value!r} has no UTC offset (add Z or +HH:MM)")
        raise TimestampError(f"{value!r} is not an RFC 3339 timestamp")
    year, month, day, hour, minute, second = (int(part) for part in match.group(1, 2, 3, 4, 5, 6))
    fraction, sign, offset_hours, offset_minutes = match.group(7, 8, 9, 10)
    offset = timedelta(0)
    if sign is not None:
        if int(offset_hours) > 23 or int(offset_minutes) > 59:
            raise TimestampError(f"{value!r} has an offset outside -23:59..+23:59")
        offset = timedelta(hours=int(offset_hours), minutes=int(offset_minutes)) * (-1 if sign == "-" else 1)
    leap = second == 60
    microsecond = 999_999 if leap else int((fraction or "").ljust(6, "0")[:6])
    try:
        local = datetime(year, month, day, hour, minute, 59 if leap else second, microsecond, tzinfo=timezone(offset))
    except ValueError as exc:
        raise TimestampError(f"{value!r} is not a valid date and time: {exc}") from None
    try:
        instant = local.astimezone(UTC)
    except OverflowError:  # e.g. 0001-01-01T00:00:00+01:00 lies before the first representable instant
        raise TimestampError(f"{value!r} is out of range once taken to UTC") from None
    if leap and (instant.hour, instant.minute) != (23, 59):
        raise TimestampError(f"{value!r} has second 60, a leap second, which occurs only at 23:59:60 UTC")
    return instant


def parse_rfc3339_iso(value: str) -> tuple[datetime, str]:
    """``parse_rfc3339(value)`` and the instant's ``isoformat()``, both cheaply for the plain UTC shape.

    ``datetime.isoformat`` on an aware value costs more than the parse itself; for a string that
    is already UTC the same text can be cut from the input. Anything else (another offset, a bad
    day of the month, more than six fraction digits) goes through ``parse_rfc3339`` unchanged, so
    errors and results are exactly its own.
    """
    match = _PLAIN_UTC.fullmatch(value)
    if match is not None:
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            parsed = None  # e.g. 2026-02-30: the full parser words the error
        if parsed is not None and parsed.tzinfo is UTC:
            # value[:19] is the date and time to the second; isoformat() pads the fraction to six
            # digits and leaves it out when it is zero.
            if parsed.microsecond:
                return parsed, f"{value[:19]}.{match[1].ljust(6, '0')}+00:00"
            return parsed, value[:19] + "+00:00"
    parsed = parse_rfc3339(value)
    return parsed, parsed.isoformat()


def to_utc(value: datetime) -> datetime:
    """Return an aware UTC datetime; a naive one is taken to be UTC already."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def format_rfc3339(value: datetime) -> str:
    """Format an instant as RFC 3339 in UTC with a ``Z`` suffix (microseconds only when present)."""
    # Not strftime("%Y"): it writes year 1 as "1" on glibc; RFC 3339 always has four digits, as
    # isoformat writes them (and the microseconds only when there are some), at a third of the cost.
    if value.tzinfo is UTC:  # nearly every instant here (parsed or built in UTC): its isoformat ends "+00:00"
        return value.isoformat()[:-6] + "Z"
    return to_utc(value).replace(tzinfo=None).isoformat() + "Z"
