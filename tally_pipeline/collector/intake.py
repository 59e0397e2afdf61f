"""What the collector makes of one message read off a notification bus: an event, ignored, or rejected.

A message body is the JSON an oslo.messaging notifier publishes: with the ``messagingv2`` driver an
envelope ``{"oslo.version": "2.0", "oslo.message": "<the notification as JSON text>"}``, with the old
``messaging`` driver the notification itself. Whatever arrives gets exactly one outcome, so nothing
read is ever unaccounted for and nothing blocks the queue:

- ``Mapped``: the envelope of our event, encoded as the buffer stores it;
- ``Ignored``: a notification of the services' families that changes no usage (the mapping's
  ``ignored`` codes: ``error_priority``, ``step``, ``audit``, ``no_usage_change``);
- ``Rejected``: kept in the collector's rejected log with the raw message. Reasons: ``unparseable``
  (not JSON, not an object, a broken envelope), ``unknown_type`` and ``invalid`` (the mapping's
  kinds), ``number_out_of_range`` (a number no event can hold: ``1e400``, an integer beyond 64
  bits) and ``invalid_text`` (a string with a lone surrogate, ``"\\ud800"``), both the sender's data,
  and ``mapping_error`` only when the mapping itself failed on it: a bug of ours, reported instead
  of retried.

Pure: no I/O. The mapping rules are ``providers.openstack.notifications``'s; nothing here changes them. Bodies
are parsed with orjson, which reads an integer beyond 64 bits as a float (as for landing files);
what orjson refuses (a number beyond a double's range) is read by the standard parser instead.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from tally_pipeline.collector.protocol import encode_event
from tally_pipeline.collector.scrub import scrub_body
from tally_pipeline.core.values import INVALID_TEXT, NUMBER_OUT_OF_RANGE, first_bad_value
from tally_pipeline.providers.openstack.notifications import Unmapped, map_notification
from tally_pipeline.redaction import redact

log = logging.getLogger("tally_pipeline.collector")

UNPARSEABLE = "unparseable"
MAPPING_ERROR = "mapping_error"
#: Every reason a bus message is rejected for (the metrics show each, zero included).
REJECT_REASONS = (UNPARSEABLE, "unknown_type", "invalid", NUMBER_OUT_OF_RANGE, INVALID_TEXT, MAPPING_ERROR)
#: Every code a notification is ignored for (the mapping's ``IgnoredCode``).
IGNORE_CODES = ("error_priority", "step", "audit", "no_usage_change")
#: A rejected message is kept as an excerpt of this many bytes of its body at most (a longer one is cut,
#: and says how much), beside its whole size and digest: poison costs the disk a few KiB a message.
EXCERPT_BYTES = 4096


@dataclass(frozen=True, slots=True)
class Mapped:
    """An event ready for the buffer: its id, its JSON text and that text's size in bytes."""

    event_id: str | None
    body: str
    size: int


@dataclass(frozen=True, slots=True)
class Ignored:
    code: str


@dataclass(frozen=True, slots=True)
class Rejected:
    reason: str
    message: str
    #: the notification's message_id when it could be read
    message_id: str | None = None


Outcome = Mapped | Ignored | Rejected


def read_message(
    body: bytes, *, cloud: str, volume_type_names: Mapping[str, str] | None = None
) -> Outcome:
    """The outcome of one message body as it came off the bus."""
    notification = _notification(body)
    if isinstance(notification, Rejected):
        return notification
    message_id = notification.get("message_id")
    message_id = message_id if isinstance(message_id, str) else None
    try:
        result = map_notification(notification, cloud=cloud, volume_type_names=volume_type_names)
    except Exception as exc:  # a mapping bug must cost one message, not the queue behind it
        log.exception("the notification mapping failed on message %s; it goes to the rejected log", message_id)
        return Rejected(MAPPING_ERROR, redact(f"{type(exc).__name__}: {exc}"), message_id)
    if isinstance(result, Unmapped):
        if result.kind == "ignored":
            return Ignored(result.code)
        return Rejected(result.code, result.reason, message_id)
    try:
        event_id, data = _encode(result)
    except ValueError as exc:  # e.g. a lone surrogate the JSON escaped: no API could read the event
        bad = first_bad_value(result)
        if bad is not None:  # a value the mapping copied as it came: the sender's data, named
            return Rejected(bad.reason, str(bad), message_id)
        return Rejected("invalid", str(exc), message_id)
    return Mapped(event_id, data.decode("utf-8"), len(data))


def _encode(event: dict[str, Any]) -> tuple[str | None, bytes]:
    """The event as the buffer keeps it: what ``protocol.encode_event`` writes, made by orjson (a tenth of
    the cost). orjson would write a non-finite float as null where ``encode_event`` refuses it, so an
    event holding any float takes ``encode_event`` (the mapping makes none: sizes are whole numbers)."""
    if _has_float(event):
        event_id, text = encode_event(event)
        return event_id, text.encode("utf-8")
    try:
        data = orjson.dumps(event)
    except orjson.JSONEncodeError as exc:
        raise ValueError(f"the event cannot be sent as strict JSON: {exc}") from None
    event_id = event.get("event_id")
    return (event_id if isinstance(event_id, str) else None), data


def _has_float(value: Any) -> bool:
    # A loop over a stack, the common leaves tested by exact type first: this runs on every event.
    stack = [value]
    while stack:
        item = stack.pop()
        for v in item.values() if isinstance(item, dict) else item:
            kind = type(v)
            if kind is str or kind is int or v is None or kind is bool:
                continue
            if isinstance(v, dict | list):
                stack.append(v)
            elif isinstance(v, float):
                return True
    return False


@dataclass(frozen=True, slots=True)
class RawCopy:
    """What the rejected log keeps of a message: an excerpt, and the whole message's size and SHA-256."""

    excerpt: str
    size: int
    digest: str


def raw_copy(body: bytes) -> RawCopy:
    return RawCopy(raw_text(body), len(body), hashlib.sha256(body).hexdigest())


def raw_text(body: bytes, limit: int = EXCERPT_BYTES) -> str:
    """The body as text for the rejected log: credentials masked first (``scrub``), undecodable bytes
    shown as escapes, cut to ``limit`` bytes (and then saying how many more there were)."""
    # The whole body: a credential is found in its JSON, not in a cut piece. A NUL is shown as an escape
    # (SQLite's text functions stop at one, so the log's byte count would drift).
    text = scrub_body(body).replace("\x00", "\\x00")
    if len(text) <= limit // 4:  # at most 4 bytes a character: surely within the bound
        return text
    data = text.encode("utf-8", "backslashreplace")
    if len(data) <= limit:
        return text
    kept = data[:limit].decode("utf-8", "ignore")
    return kept + f"… [{len(body)} bytes in all; the first {len(kept.encode('utf-8'))} bytes of its text kept]"


def _notification(body: bytes) -> dict[str, Any] | Rejected:
    message = _json(body, "the message")
    if isinstance(message, Rejected):
        return message
    if not isinstance(message, dict):
        return Rejected(UNPARSEABLE, f"the message is a JSON {type(message).__name__}, not an object")
    if "oslo.message" not in message:
        return message  # the old ``messaging`` driver: the notification without an envelope
    version = message.get("oslo.version")
    if not isinstance(version, str) or version.split(".", 1)[0] != "2":
        return Rejected(UNPARSEABLE, f"oslo.messaging envelope version {version!r} is not 2.x")
    inner = message["oslo.message"]
    if not isinstance(inner, str):
        return Rejected(UNPARSEABLE, "the envelope's oslo.message is not a JSON text")
    notification = _json(inner, "the envelope's oslo.message")  # orjson reads the str as it is
    if isinstance(notification, Rejected):
        return notification
    if not isinstance(notification, dict):
        return Rejected(UNPARSEABLE, f"the envelope's oslo.message is a JSON {type(notification).__name__}, "
                                     "not an object")
    return notification


def _json(data: bytes | str, what: str) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        pass
    # orjson refuses integers beyond 64 bits, which are JSON all the same: ask the standard parser,
    # strictly (NaN and Infinity are not JSON and would make the event unsendable).
    try:
        return json.loads(data, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        return Rejected(UNPARSEABLE, f"{what} is not JSON: {exc}")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")
