"""RFC 3339 timestamps: parsed strictly, always carried as aware UTC datetimes."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from tally_pipeline.core.errors import TallyError

_RFC3339 = re.compile(
    r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$"
)


# The shape nearly every collector sends (UTC, "T", at most microseconds). It is a strict subset of
# _RFC3339 in ASCII digits only, so anything it admits the full parser reads the same way.
_PLAIN_UTC = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.([0-9]{1,6}))?(?:Z|\+00:00)")


class TimestampError(TallyError, ValueError):
    """A string that is not an RFC 3339 timestamp with an offset."""


def parse_rfc3339(value: str) -> datetime:
    """Parse an RFC 3339 timestamp that carries an offset, returning it in UTC.

    Sub-microsecond digits are truncated (the stores keep microseconds).
    """
    if not _RFC3339.match(value):
        if re.match(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?$", value):
            raise TimestampError(f"{value!r} has no UTC offset (add Z or +HH:MM)")
        raise TimestampError(f"{value!r} is not an RFC 3339 timestamp")
    try:
        parsed = datetime.fromisoformat(value.upper())
    except ValueError as exc:
        raise TimestampError(f"{value!r} is not a valid date and time: {exc}") from None
    try:
        return parsed.astimezone(UTC)
    except OverflowError:  # e.g. 0001-01-01T00:00:00+01:00 lies before the first representable instant
        raise TimestampError(f"{value!r} is out of range once taken to UTC") from None


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
    value = to_utc(value)
    # Not strftime("%Y"): it writes year 1 as "1" on glibc; RFC 3339 always has four digits.
    text = (f"{value.year:04d}-{value.month:02d}-{value.day:02d}"
            f"T{value.hour:02d}:{value.minute:02d}:{value.second:02d}")
    if value.microsecond:
        text += f".{value.microsecond:06d}"
    return text + "Z"
