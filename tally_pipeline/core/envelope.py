"""The event envelope: one pydantic model at the edge, and the validation every writer goes through.

``validate_event`` turns one received item into either an ``EventRecord`` (normalised, ready to
store) or a ``Rejection`` with a machine-readable reason and a message that names the field.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, StringConstraints, ValidationError

from tally_pipeline.core.jsontext import DuplicateKeys, InexactNumber, Unreadable, first_inexact
from tally_pipeline.core.registry import SizeSchemaRegistry
from tally_pipeline.core.timeutil import TimestampError, format_rfc3339, parse_rfc3339_iso
from tally_pipeline.core.values import INVALID_TEXT, NUMBER_OUT_OF_RANGE, first_bad_value
from tally_pipeline.core.verbs import Verb, verb_of

MAX_PAYLOAD_BYTES = 64 * 1024
# payload.status is the platform status the fold carries into the lifecycle (meters bill by it).
MAX_STATUS_CHARS = 64
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
# Length bounds of the envelope's strings, shared by the model and the shortcut past it.
EVENT_ID_MAX = 200
EVENT_TYPE_MAX = 255
RESOURCE_TYPE_MAX = 63
RESOURCE_ID_MAX = 255
PROJECT_ID_MAX = 255
OCCURRED_AT_MAX = 64
EVENT_TYPE_PATTERN = r"^[a-z0-9_-]+(\.[a-z0-9_-]+)*$"

Source = Literal["collector", "reconciliation"]


class Envelope(BaseModel):
    """The JSON envelope every event arrives in (docs/data-dictionary.md)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    event_id: Annotated[str, StringConstraints(min_length=1, max_length=EVENT_ID_MAX)]
    event_type: Annotated[str, StringConstraints(max_length=EVENT_TYPE_MAX, pattern=EVENT_TYPE_PATTERN)]
    cloud: Annotated[str, StringConstraints(pattern=CLOUD_PATTERN)]
    resource_type: Annotated[str, StringConstraints(min_length=1, max_length=RESOURCE_TYPE_MAX)]
    resource_id: Annotated[str, StringConstraints(min_length=1, max_length=RESOURCE_ID_MAX)]
    project_id: Annotated[str, StringConstraints(min_length=1, max_length=PROJECT_ID_MAX)] | None = None
    occurred_at: Annotated[str, StringConstraints(max_length=OCCURRED_AT_MAX)]
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
    # occurred_at.isoformat() as validation made it for the content hash, and the instant it is the
    # text of: see occurred_at_iso.
    _occurred_at_text: str = field(default="", repr=False, compare=False)
    _occurred_at_text_of: datetime | None = field(default=None, repr=False, compare=False)

    def occurred_at_iso(self) -> str:
        """``occurred_at.isoformat()``, without formatting it again if validation already did.

        A store that writes rows as text needs it, and formatting a datetime costs more than the
        rest of a row; the kept text is used only while occurred_at is the instant it was made from.
        """
        if self.occurred_at is self._occurred_at_text_of:
            return self._occurred_at_text
        return self.occurred_at.isoformat()

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
    """Validate one received item against the envelope and its type's size schema.

    Well-formed envelopes take a shortcut past the pydantic model (most of the cost of a valid
    event); the shortcut only ever accepts. Whatever it is unsure of, and every item that is
    refused, goes through ``validate_event_reference``, so each result is exactly the model's.
    """
    fields = _plain_envelope(item)
    if fields is not None:
        checked = _normalise(*fields, registry)
        if not isinstance(checked, Rejection):
            return checked
    return validate_event_reference(item, registry)


def validate_event_reference(item: Any, registry: SizeSchemaRegistry) -> EventRecord | Rejection:
    """The rule itself (the pydantic envelope, then the checks that need the registry); slower."""
    if isinstance(item, Unreadable):
        return Rejection("invalid_item", f"invalid_item: the item is {item.why}")
    if not isinstance(item, dict):
        return Rejection("invalid_item", f"item: expected a JSON object, got {_json_type(item)}")
    if isinstance(item, DuplicateKeys):
        return Rejection("invalid_item", f"invalid_item: key {item.duplicate[:100]!r} is written more than once")
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
    return _normalise(env.event_id, env.event_type, env.cloud, env.resource_type, env.resource_id,
                      env.project_id, env.occurred_at, env.source, env.payload, registry)


_Fields = tuple[str, str, str, str, str, "str | None", str, str, dict[str, Any]]

_MISSING: Any = object()
_CLOUD = re.compile(CLOUD_PATTERN[1:-1])  # fullmatch instead of ^…$: Python's $ also matches before a final \n
_EVENT_TYPE = re.compile(EVENT_TYPE_PATTERN[1:-1])
_SOURCES = frozenset(("collector", "reconciliation"))
# Clouds and event types repeat endlessly; a value once matched is not matched again. Bounded.
_KNOWN_CACHE_MAX = 4096
_known_clouds: set[str] = set()
_known_event_types: set[str] = set()


def _plain_envelope(item: Any) -> _Fields | None:
    """The envelope's fields when the model would surely accept ``item`` as is, else None.

    Only exact ``dict`` and ``str`` values are taken (the model converts subclasses); each bound
    below is the model's own. A string the model refuses that these checks miss (a lone surrogate)
    cannot be written as JSON, so ``_normalise`` refuses it and the caller asks the model.
    """
    if type(item) is not dict:
        return None
    get = item.get
    event_id = get("event_id")
    event_type = get("event_type")
    cloud = get("cloud")
    resource_type = get("resource_type")
    resource_id = get("resource_id")
    occurred_at = get("occurred_at")
    if not (
        type(event_id) is str and 0 < len(event_id) <= EVENT_ID_MAX
        and type(event_type) is str and (event_type in _known_event_types or _admit_event_type(event_type))
        and type(cloud) is str and (cloud in _known_clouds or _admit_cloud(cloud))
        and type(resource_type) is str and 0 < len(resource_type) <= RESOURCE_TYPE_MAX
        and type(resource_id) is str and 0 < len(resource_id) <= RESOURCE_ID_MAX
        and type(occurred_at) is str and len(occurred_at) <= OCCURRED_AT_MAX
    ):
        return None
    present = 6
    project_id = get("project_id", _MISSING)
    if project_id is _MISSING:
        project_id = None
    else:
        present += 1
        if project_id is not None and not (type(project_id) is str and 0 < len(project_id) <= PROJECT_ID_MAX):
            return None
    source = get("source", _MISSING)
    if source is _MISSING:
        source = "collector"
    else:
        present += 1
        if type(source) is not str or source not in _SOURCES:
            return None
    payload = get("payload", _MISSING)
    if payload is _MISSING:
        payload = {}
    else:
        present += 1
        if type(payload) is not dict:
            return None
        for key in payload:
            if type(key) is not str:
                return None
        payload = dict(payload)  # the model hands over a copy too
    if len(item) != present:  # a field outside the envelope
        return None
    return event_id, event_type, cloud, resource_type, resource_id, project_id, occurred_at, source, payload


def _admit_event_type(event_type: str) -> bool:
    if len(event_type) > EVENT_TYPE_MAX or _EVENT_TYPE.fullmatch(event_type) is None:
        return False
    if len(_known_event_types) < _KNOWN_CACHE_MAX:
        _known_event_types.add(event_type)
    return True


def is_cloud_name(cloud: str) -> bool:
    """Whether ``cloud`` is a valid cloud name (the envelope's pattern)."""
    return cloud in _known_clouds or _CLOUD.fullmatch(cloud) is not None


def _admit_cloud(cloud: str) -> bool:
    if _CLOUD.fullmatch(cloud) is None:
        return False
    if len(_known_clouds) < _KNOWN_CACHE_MAX:
        _known_clouds.add(cloud)
    return True


def _normalise(
    event_id: str,
    event_type: str,
    cloud: str,
    resource_type: str,
    resource_id: str,
    project_id: str | None,
    occurred_at: str,
    source: str,
    payload: dict[str, Any],
    registry: SizeSchemaRegistry,
) -> EventRecord | Rejection:
    """The checks after the envelope's shape: time, type, verb, size, storable JSON; then the record."""
    try:
        instant, instant_iso = parse_rfc3339_iso(occurred_at)
    except TimestampError as exc:
        return Rejection("invalid_timestamp", f"invalid_timestamp: occurred_at: {exc}")
    if resource_type not in registry:
        known = ", ".join(registry.names)
        return Rejection(
            "unknown_resource_type",
            f"unknown_resource_type: resource_type: {resource_type!r} is not registered (known: {known})",
        )
    verb = verb_of(event_type)
    if verb == "create" and project_id is None:
        return Rejection("missing_project_id", f"missing_project_id: project_id is required on a create ({event_type})")
    size = payload.get("size")
    if size is None:
        if verb in ("create", "update"):
            return Rejection("missing_size", f"missing_size: payload.size is required on a {verb} ({event_type})")
    else:
        stored, problem = registry[resource_type].checked_size(size)
        if problem is not None:
            inexact = first_inexact(size, "payload.size")
            if inexact is not None:  # not a size problem: the number itself cannot be stored as written
                return _inexact_rejection(*inexact)
            return Rejection("size_schema", f"size_schema: {problem}")
        if stored is not size:  # whole-number floats made integers: the form the meters read
            payload = {**payload, "size": stored}
    status = payload.get("status")
    if status is not None and (type(status) is not str or len(status) > MAX_STATUS_CHARS):
        return Rejection("invalid_payload", f"invalid_payload: payload.status: {str(status)[:80]!r} is not a "
                                            f"status (a string of at most {MAX_STATUS_CHARS} characters)")
    try:
        payload_json = orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)
        canonical = orjson.dumps(
            [event_id, event_type, cloud, resource_type, resource_id, project_id, instant_iso, source],
        )
    except (TypeError, orjson.JSONEncodeError) as exc:
        inexact = first_inexact(payload, "payload")
        if inexact is not None:
            return _inexact_rejection(*inexact)
        bad = first_bad_value(payload, "payload")
        if bad is not None:  # an integer beyond 64 bits, a lone surrogate: the sender's data, named
            return Rejection(bad.reason, str(bad))
        return Rejection("invalid_payload", f"invalid_payload: cannot be stored as JSON: {exc}")
    # bytes.find, not ``in``: CPython's bytes ``in`` first tries its operand as an integer, raising and
    # clearing a formatted TypeError each time (three a valid event: 4 % of validating and ordering one).
    if payload_json.find(b"null") >= 0 and _has_non_finite(payload):
        # orjson writes an infinity (a JSON number like 1e400) or NaN as null: refuse rather than change the data.
        bad = first_bad_value(payload, "payload")
        if bad is not None:
            return Rejection(bad.reason, str(bad))
        return Rejection("invalid_payload", "invalid_payload: a number is not a number (NaN)")
    if len(payload_json) > MAX_PAYLOAD_BYTES:
        return Rejection(
            "payload_too_large",
            f"payload_too_large: payload is {len(payload_json)} bytes as JSON (max {MAX_PAYLOAD_BYTES})",
        )
    if payload_json.find(b"\\u0000") >= 0 or canonical.find(b"\\u0000") >= 0:
        # PostgreSQL text and jsonb cannot hold NUL; refuse it here rather than fail a whole batch.
        return Rejection("invalid_field", "invalid_field: strings must not contain the NUL character (\\u0000)")
    digest = hashlib.blake2b(canonical, digest_size=16)
    digest.update(payload_json)
    return EventRecord(  # positionally: keywords cost a third of the constructor
        event_id, event_type, verb, cloud, resource_type, resource_id, project_id, instant, source,
        payload, payload_json.decode(), digest.hexdigest(), instant_iso, instant,
    )


def _inexact_rejection(path: str, number: InexactNumber) -> Rejection:
    if number.out_of_range():
        return Rejection(NUMBER_OUT_OF_RANGE, f"{NUMBER_OUT_OF_RANGE}: {path}: {number.text[:40]} is beyond a "
                                              "64-bit float's range")
    return Rejection("invalid_payload", f"invalid_payload: {path}: {number.describe()}")


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
    if kind == "string_unicode":
        return Rejection(INVALID_TEXT, f"{INVALID_TEXT}: {field}: a lone surrogate (e.g. \\ud800) is not text")
    given = error.get("input")
    shown = repr(given) if isinstance(given, (str, int, float, bool)) or given is None else _json_type(given)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    if field == "occurred_at":
        return Rejection("invalid_timestamp", f"invalid_timestamp: occurred_at: {shown}: {error['msg']}")
    if field == "payload":
        return Rejection("invalid_payload", f"invalid_payload: payload: {shown}: {error['msg']}")
    return Rejection("invalid_field", f"invalid_field: {field}: {shown}: {error['msg']}")
