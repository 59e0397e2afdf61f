"""The event envelope: one pydantic model at the edge, and the validation every writer goes through.

``validate_event`` turns one received item into either an ``EventRecord`` (normalised, ready to
store) or a ``Rejection`` with a machine-readable reason and a message that names the field.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, StringConstraints, ValidationError

from tally_pipeline.core.registry import SizeSchemaRegistry
from tally_pipeline.core.timeutil import TimestampError, format_rfc3339, parse_rfc3339
from tally_pipeline.core.verbs import Verb, verb_of

MAX_PAYLOAD_BYTES = 64 * 1024
ENVELOPE_FIELDS = (
    "event_id",
    "event_type",
    "cloud",
    "resource_type",
    "resource_id",
    "project_id",
    "occurred_at",
    "source",
    "payload",
)
_ENVELOPE_FIELD_SET = frozenset(ENVELOPE_FIELDS)
CLOUD_PATTERN = r"^[A-Za-z0-9_.-]{1,63}$"
EVENT_TYPE_PATTERN = r"^[a-z0-9_-]+(\.[a-z0-9_-]+)*$"

Source = Literal["collector", "reconciliation"]


class Envelope(BaseModel):
    """The JSON envelope every event arrives in (DESIGN.md §4.1)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    event_id: Annotated[str, StringConstraints(min_length=1, max_length=200)]
    event_type: Annotated[str, StringConstraints(max_length=255, pattern=EVENT_TYPE_PATTERN)]
    cloud: Annotated[str, StringConstraints(pattern=CLOUD_PATTERN)]
    resource_type: Annotated[str, StringConstraints(min_length=1, max_length=63)]
    resource_id: Annotated[str, StringConstraints(min_length=1, max_length=255)]
    project_id: Annotated[str, StringConstraints(min_length=1, max_length=255)] | None = None
    occurred_at: Annotated[str, StringConstraints(max_length=64)]
    source: Source = "collector"
    payload: dict[str, Any] = {}


@dataclass(slots=True)
class EventRecord:
    """A valid event, normalised: UTC time, its verb, canonical payload JSON and a content hash."""

    event_id: str
    event_type: str
    verb: Verb
    cloud: str
    resource_type: str
    resource_id: str
    project_id: str | None
    occurred_at: datetime
    source: str
    payload: dict[str, Any]
    payload_json: str
    content_hash: str

    def envelope(self) -> dict[str, Any]:
        """The event as it would be sent again: the envelope fields only."""
        return {
            "event_id": self.event_id,
            "event_type": self.event_type,
            "cloud": self.cloud,
            "resource_type": self.resource_type,
            "resource_id": self.resource_id,
            "project_id": self.project_id,
            "occurred_at": format_rfc3339(self.occurred_at),
            "source": self.source,
            "payload": self.payload,
        }


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why an item was refused: a reason code for machines, a message naming the field for people."""

    reason: str
    message: str

    def __str__(self) -> str:
        return self.message


def validate_event(item: Any, registry: SizeSchemaRegistry) -> EventRecord | Rejection:
    """Validate one received item against the envelope and its type's size schema."""
    if not isinstance(item, dict):
        return Rejection("invalid_item", f"item: expected a JSON object, got {_json_type(item)}")
    unknown = item.keys() - _ENVELOPE_FIELD_SET
    if unknown:
        name = min(map(str, unknown))
        return Rejection(
            "unknown_field",
            f"unknown_field: {str(name)[:100]!r} is not an envelope field (extra data belongs in payload)",
        )
    try:
        env = Envelope.model_validate(item)
    except ValidationError as exc:
        return _rejection_from(exc)
    try:
        occurred_at = parse_rfc3339(env.occurred_at)
    except TimestampError as exc:
        return Rejection("invalid_timestamp", f"invalid_timestamp: occurred_at: {exc}")
    if env.resource_type not in registry:
        known = ", ".join(registry.names)
        return Rejection(
            "unknown_resource_type",
            f"unknown_resource_type: resource_type: {env.resource_type!r} is not registered (known: {known})",
        )
    verb = verb_of(env.event_type)
    if verb == "create" and env.project_id is None:
        return Rejection("missing_project_id", f"missing_project_id: project_id is required on a create ({env.event_type})")
    size = env.payload.get("size")
    if size is None:
        if verb in ("create", "update"):
            return Rejection("missing_size", f"missing_size: payload.size is required on a {verb} ({env.event_type})")
    else:
        problem = registry[env.resource_type].size_error(size)
        if problem is not None:
            return Rejection("size_schema", f"size_schema: {problem}")
    try:
        payload_json = orjson.dumps(env.payload, option=orjson.OPT_SORT_KEYS)
        canonical = orjson.dumps(
            [env.event_id, env.event_type, env.cloud, env.resource_type, env.resource_id,
             env.project_id, occurred_at.isoformat(), env.source],
        )
    except (TypeError, orjson.JSONEncodeError) as exc:
        return Rejection("invalid_payload", f"invalid_payload: cannot be stored as JSON: {exc}")
    if b"null" in payload_json and _has_non_finite(env.payload):
        # orjson writes an infinity (a JSON number like 1e400) or NaN as null: refuse rather than change the data.
        return Rejection("invalid_payload", "invalid_payload: a number is out of range (beyond a 64-bit float)")
    if len(payload_json) > MAX_PAYLOAD_BYTES:
        return Rejection(
            "payload_too_large",
            f"payload_too_large: payload is {len(payload_json)} bytes as JSON (max {MAX_PAYLOAD_BYTES})",
        )
    if b"\\u0000" in payload_json or b"\\u0000" in canonical:
        # PostgreSQL text and jsonb cannot hold NUL; refuse it here rather than fail a whole batch.
        return Rejection("invalid_field", "invalid_field: strings must not contain the NUL character (\\u0000)")
    digest = hashlib.blake2b(canonical, digest_size=16)
    digest.update(payload_json)
    return EventRecord(
        event_id=env.event_id,
        event_type=env.event_type,
        verb=verb,
        cloud=env.cloud,
        resource_type=env.resource_type,
        resource_id=env.resource_id,
        project_id=env.project_id,
        occurred_at=occurred_at,
        source=env.source,
        payload=env.payload,
        payload_json=payload_json.decode(),
        content_hash=digest.hexdigest(),
    )


def _has_non_finite(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(_has_non_finite(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_non_finite(v) for v in value)
    return False


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return type(value).__name__


def _rejection_from(exc: ValidationError) -> Rejection:
    error = exc.errors(include_url=False)[0]
    field = ".".join(str(p) for p in error["loc"]) or "item"
    kind = error["type"]
    if kind == "missing":
        return Rejection("missing_field", f"missing_field: {field} is required")
    if kind == "extra_forbidden":
        return Rejection("unknown_field", f"unknown_field: {field!r} is not an envelope field")
    given = error.get("input")
    shown = repr(given) if isinstance(given, (str, int, float, bool)) or given is None else _json_type(given)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    if field == "occurred_at":
        return Rejection("invalid_timestamp", f"invalid_timestamp: occurred_at: {shown}: {error['msg']}")
    if field == "payload":
        return Rejection("invalid_payload", f"invalid_payload: payload: {shown}: {error['msg']}")
    return Rejection("invalid_field", f"invalid_field: {field}: {shown}: {error['msg']}")
