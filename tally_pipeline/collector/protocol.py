"""The wire side of ``POST /v1/events`` as the collector sees it (docs/architecture.md, «The HTTP API»): request bodies and answers."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, ValidationError

MAX_BATCH = 1000
EVENTS_PATH = "/v1/events"
_OPEN = b'{"events":['
_CLOSE = b"]}"
ENVELOPE_OVERHEAD = len(_OPEN) + len(_CLOSE)


class ItemResult(BaseModel):
    model_config = ConfigDict(extra="ignore")

    index: int
    event_id: str | None = None
    status: Literal["stored", "duplicate", "rejected"]
    reason: str | None = None
    message: str | None = None
    conflict: bool = False


class BatchAnswer(BaseModel):
    model_config = ConfigDict(extra="ignore")

    results: list[ItemResult]


def encode_event(event: Any) -> tuple[str | None, str]:
    """The event's JSON text exactly as it will be sent, and its event_id (when it has a string one).

    Refuses what the API could not parse as strict JSON (NaN, infinities, lone surrogates), because
    one such item would make every batch it joins unreadable: the caller hears it now, at submit.
    """
    if not isinstance(event, dict):
        raise TypeError(f"an event is a JSON object (a dict), got {type(event).__name__}")
    try:
        text = json.dumps(event, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        text.encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise ValueError(f"the event cannot be sent as strict JSON: {exc}") from None
    event_id = event.get("event_id")
    return (event_id if isinstance(event_id, str) else None), text


def batch_body(bodies: Sequence[str]) -> bytes:
    return _OPEN + ",".join(bodies).encode("utf-8") + _CLOSE


def parse_answer(content: bytes) -> BatchAnswer | str:
    """The 200 answer, or why it could not be read."""
    try:
        return BatchAnswer.model_validate_json(content)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        return f"unreadable 200 answer: {where}: {first['msg']}"


def error_fields(content: bytes) -> dict[str, Any]:
    """The JSON error object of a non-200 answer, or {} when it has none (a proxy's HTML page, say)."""
    try:
        value = orjson.loads(content)
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def describe(status: int, content: bytes) -> str:
    fields = error_fields(content)
    if fields:
        detail = ", ".join(f"{k}={v!r}" for k, v in fields.items() if isinstance(v, (str, int, float, bool)))
        return f"HTTP {status} ({detail})" if detail else f"HTTP {status}"
    snippet = content[:200].decode("utf-8", "replace").strip()
    return f"HTTP {status}: {snippet}" if snippet else f"HTTP {status}"
