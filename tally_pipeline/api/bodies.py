"""Reading request bodies: bounded in size, parsed strictly, with the error the contract names."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from tally_pipeline.core.errors import TallyError
from tally_pipeline.core.jsontext import BadJson, DuplicateKeys, loads_exact


class BodyTooLarge(TallyError):
    def __init__(self, limit: int):
        super().__init__(f"request body exceeds {limit} bytes")
        self.limit = limit


@dataclass(frozen=True)
class BadBody(TallyError):
    error: str  # invalid_json | invalid_body
    detail: str


async def read_limited(request: Request, limit: int) -> bytes:
    """The whole body, or ``BodyTooLarge`` as soon as it is known to be over ``limit`` (never read in full)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def parse_json(body: bytes) -> Any:
    """Parse a JSON body exactly (numbers as written, duplicate keys seen: see ``core.jsontext``), so
    such values reach item validation and get an item-level reason."""
    try:
        return loads_exact(body)
    except BadJson as exc:
        raise BadBody("invalid_json", f"body is {exc}") from None


def events_of(body: Any) -> list[Any]:
    """The ``events`` list of a batch body ``{"events": [...]}``."""
    if not isinstance(body, dict):
        raise BadBody("invalid_body", 'expected an object {"events": [...]}')
    if isinstance(body, DuplicateKeys):
        raise BadBody("invalid_body", f"key {body.duplicate[:100]!r} is written more than once")
    extra = sorted(str(k) for k in body if k != "events")
    if extra:
        raise BadBody("invalid_body", f"unexpected key {extra[0]!r}: the body holds only \"events\"")
    if "events" not in body:
        raise BadBody("invalid_body", 'missing "events": expected {"events": [...]}')
    events = body["events"]
    if not isinstance(events, list):
        raise BadBody("invalid_body", '"events" must be an array')
    return events


def raw_text(body: bytes) -> str:
    """A body kept for the dead letter: its text, with undecodable bytes and NULs escaped."""
    return body.decode("utf-8", errors="backslashreplace").replace("\x00", "\\u0000")
