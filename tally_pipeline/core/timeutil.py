"""RFC 3339 timestamps: parsed strictly, always carried as aware UTC datetimes."""

from __future__ import annotations

import re
from datetime import UTC, datetime

_RFC3339 = re.compile(
    r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$"
)


class TimestampError(ValueError):
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


def to_utc(value: datetime) -> datetime:
    """Return an aware UTC datetime; a naive one is taken to be UTC already."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def format_rfc3339(value: datetime) -> str:
    """Format an instant as RFC 3339 in UTC with a ``Z`` suffix (microseconds only when present)."""
    value = to_utc(value)
    text = value.strftime("%Y-%m-%dT%H:%M:%S")
    if value.microsecond:
        text += f".{value.microsecond:06d}"
    return text + "Z"
