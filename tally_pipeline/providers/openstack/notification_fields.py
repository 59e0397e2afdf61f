"""Reading fields out of OpenStack notification payloads: strict, and never guessing.

Shared by the per-service mappings (``providers.openstack.notifications``) and nova's (``providers.openstack.nova_notifications``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from tally_pipeline.core.errors import InputError
from tally_pipeline.core.values import INT64_MAX, INVALID_TEXT, NUMBER_OUT_OF_RANGE, is_text, number_problem


class Invalid(InputError, ValueError):
    """A mapped event type whose payload lacks what the mapping needs. ``code`` says what is wrong:
    ``invalid`` (missing, of the wrong kind), or a bad value's reason (``core.values``)."""

    def __init__(self, message: str, code: str = "invalid"):
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class Extracted:
    """What a mapping found in one payload."""

    resource_id: str
    project_id: str | None
    size: dict[str, Any] | None
    status: str | None
    created_at: str | None = None
    deleted_at: str | None = None


def text(payload: Mapping[str, Any], key: str) -> str:
    value = optional_text(payload, key)
    if value is None:
        raise Invalid(f"payload has no {key}")
    return value


def optional_text(payload: Mapping[str, Any], key: str) -> str | None:
    value = payload.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise Invalid(f"payload {key} {value!r} is not a string")
    if not is_text(value):
        raise Invalid(f"payload {key} {value!r} holds a lone surrogate: not text", INVALID_TEXT)
    return value


def whole(payload: Mapping[str, Any], key: str) -> int:
    value = payload.get(key)
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)  # some payload fields are stringified numbers
    check_magnitude(value, f"payload {key}")
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value) or value < 0:
        raise Invalid(f"payload {key} {value!r} is not a whole number")
    return int(value)


def check_magnitude(value: Any, what: str) -> None:
    """Refuse a number no whole-number field holds: infinity, NaN, or beyond 64 bits (an integer that
    large is read as a float, so a float beyond 2^63 is one)."""
    problem = number_problem(value)
    if problem is None and isinstance(value, float) and (math.isnan(value) or abs(value) > INT64_MAX):
        problem = "NaN is not a number" if math.isnan(value) else f"{value!r} is beyond a 64-bit integer's range"
    if problem is not None:
        raise Invalid(f"{what}: {problem}", NUMBER_OUT_OF_RANGE)


def instant(value: Any, what: str) -> datetime | None:
    """OpenStack's many time spellings: ``2026-01-01 00:00:05.123456`` (oslo, naive UTC),
    ``2026-01-01T00:00:00Z``, ``2026-01-01 00:00:00+00:00`` (nova's ``str(datetime)``)."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise Invalid(f"{what} {value!r} is not a string")
    if not is_text(value):
        raise Invalid(f"{what} {value!r} holds a lone surrogate: not text", INVALID_TEXT)
    raw = value.strip()
    if raw.endswith(("Z", "z")):
        raw = raw[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(raw)
    except ValueError:
        raise Invalid(f"{what} {value!r} is not a date and time") from None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
