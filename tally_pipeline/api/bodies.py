"""Reading request bodies: bounded in size, parsed strictly, with the error the contract names."""

from __future__ import annotations

import codecs
from dataclasses import dataclass
from typing import Any

from starlette.requests import ClientDisconnect, Request

from tally_pipeline.core.errors import InputError
from tally_pipeline.core.jsontext import BadJson, DuplicateKeys, loads_exact


class BodyTooLarge(InputError):
    def __init__(self, limit: int):
        super().__init__(f"request body exceeds {limit} bytes")
        self.limit = limit


@dataclass(frozen=True)
class BadBody(InputError):
    error: str  # invalid_json | invalid_body
    detail: str


async def read_limited(request: Request, limit: int) -> bytes:
    """The whole body, or ``BodyTooLarge`` once it is known to be over ``limit`` (never kept in full).

    A body over the limit is still read, and dropped, up to ``drain_limit(limit)``: a client that is
    still sending when the answer comes and the connection closes gets a TCP reset instead of the
    answer. A body declared larger than that is not read at all (the answer closes the connection).
    """
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        await drain(request, drain_limit(limit))
        raise BodyTooLarge(limit)
    chunks: list[bytes] = []
    size = 0
    stream = request.stream()
    async for chunk in stream:
        size += len(chunk)
        if size > limit:
            async for more in stream:  # the rest, read and dropped, up to the bound
                size += len(more)
                if size > drain_limit(limit):
                    break
            raise BodyTooLarge(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def drain_limit(limit: int) -> int:
    """How much of a refused body is read and dropped so that its client can read the answer."""
    return 2 * limit


async def drain(request: Request, budget: int) -> bool:
    """Read and drop the rest of the body when it is at most ``budget`` bytes; whether all of it was read.

    A body declared larger is left unread (the answer then closes the connection)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > budget:
        return False
    read = 0
    try:
        async for chunk in request.stream():
            read += len(chunk)
            if read > budget:
                return False
    except ClientDisconnect:
        return False
    return True


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


#: Bytes decoded at a time when a body is not UTF-8 (see ``raw_text``).
DECODE_CHUNK = 64 * 1024


def raw_text(body: bytes) -> str:
    """A body kept for the dead letter: its text, with undecodable bytes and NULs escaped.

    Text is decoded in one call. Bytes that are not UTF-8 take the error handler once per bad byte,
    inside one C call that keeps the GIL: 5 MiB of random bytes held every other thread, the event
    loop's included, for seconds. So they are decoded a chunk at a time (the incremental decoder
    joins a character split between chunks), and the loop gets its turn between chunks.
    """
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="backslashreplace")
        last = len(body)
        text = "".join(decoder.decode(body[i:i + DECODE_CHUNK], i + DECODE_CHUNK >= last)
                       for i in range(0, last, DECODE_CHUNK))
    return text.replace("\x00", "\\u0000")
