"""Received JSON read exactly: numbers as written, duplicate keys seen, each item's own text.

orjson is the fast reader, but it rounds numbers (``1e-400`` becomes ``0.0``, ``999999999.99999999999``
becomes ``1000000000.0``, ``1e400`` infinity) and keeps the last of duplicate keys silently. So a
text is read by orjson and accepted as is only when writing the result back gives the very same
bytes: then every number is the shortest text of the float it became (stored exactly) and no key
was dropped. Collectors write compact JSON, so that is nearly every body; anything else is read
again by the standard library with hooks that keep what orjson would lose:

- a number whose float is not the number written becomes an ``InexactNumber`` (refused later as
  ``number_out_of_range`` beyond a float's range, else ``invalid_payload``); integers are exact at
  any size (refused later, ``number_out_of_range``, if beyond 64 bits);
- an object with a key written twice becomes a ``DuplicateKeys`` dict naming the key, and so does
  each item holding one anywhere inside (an element of a body's ``events`` array, or else the whole
  value), so that the item is refused (``invalid_item``) without every valid item paying for a search;
- an element of a body's ``events`` array that no reader takes (an integer of more than 4,300 digits,
  nesting deeper than the parsers go) becomes an ``Unreadable`` holding why, so that this one item is
  refused (``invalid_item``) and its neighbours are still read: one poison item never refuses a batch.
"""

from __future__ import annotations

import json
import math
import re
from decimal import Decimal, InvalidOperation
from typing import Any

import orjson

from tally_pipeline.core.errors import InputError


class BadJson(InputError, ValueError):
    """A text that is not JSON."""


class InexactNumber:
    """A number a 64-bit float cannot hold as written; kept as its text so nothing is stored rounded.

    Deliberately a plain class, not a dataclass: orjson writes dataclasses as objects, and this must
    make any attempt to write it fail.
    """

    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return f"InexactNumber({self.text!r})"

    def out_of_range(self) -> bool:
        """Beyond a 64-bit float's range (infinity or, for a number that is not zero, zero), not only
        rounded."""
        try:
            became = float(self.text)
        except (OverflowError, ValueError):
            return True
        if math.isinf(became):
            return True
        try:
            return became == 0.0 and Decimal(self.text) != 0
        except InvalidOperation:
            return False

    def describe(self) -> str:
        try:
            became: object = float(self.text)
        except OverflowError:
            became = "out of range"
        return f"{self.text[:40]} cannot be stored exactly (as a 64-bit float it would be {became})"


class Unreadable:
    """An element of a body's ``events`` array that is not JSON this server reads; kept with the reason.

    A plain class, like ``InexactNumber``: nothing may write it back as if it were a value.
    """

    __slots__ = ("why",)

    def __init__(self, why: str):
        self.why = why

    def __repr__(self) -> str:
        return f"Unreadable({self.why!r})"


class DuplicateKeys(dict):  # type: ignore[type-arg]
    """An object in which ``duplicate`` was written more than once (the last value is kept here)."""

    duplicate: str = ""


def _exact_float(text: str) -> float | InexactNumber:
    value = float(text)
    try:
        if value - value == 0 and Decimal(repr(value)) == Decimal(text):  # finite, and the same number
            return value
    except InvalidOperation:  # pragma: no cover - json only hands over valid number texts
        pass
    return InexactNumber(text)


class _ExactDecoder(json.JSONDecoder):
    """The standard library's decoder with the hooks above; ``duplicates`` tells whether any object
    had a key written twice (one decoder per text, so threads never share the flag)."""

    def __init__(self) -> None:
        super().__init__(object_pairs_hook=self._pairs, parse_float=_exact_float, parse_constant=_reject_constant)
        self.duplicates = False

    def _pairs(self, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out = dict(pairs)
        if len(out) == len(pairs):
            return out
        self.duplicates = True
        seen: set[str] = set()
        marked = DuplicateKeys(out)
        for key, _ in pairs:
            if key in seen:
                marked.duplicate = key
                break
            seen.add(key)
        return marked


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def decode_item(text: str, pos: int = 0) -> tuple[Any, int]:
    """One JSON value of ``text`` from ``pos``, read exactly, and where it ends (``raw_decode``);
    the value is a ``DuplicateKeys`` when any object inside it has a key written twice."""
    decoder = _ExactDecoder()
    value, end = decoder.raw_decode(text, pos)
    return (marked_item(value) if decoder.duplicates else value), end


def marked_item(item: Any) -> Any:
    """``item`` as a ``DuplicateKeys`` naming the key when any object inside it has a key written twice."""
    if not isinstance(item, dict) or isinstance(item, DuplicateKeys):
        return item
    duplicate = duplicate_key(item)
    if duplicate is None:
        return item
    marked = DuplicateKeys(item)
    marked.duplicate = duplicate
    return marked


def _mark_items(value: Any) -> Any:
    if isinstance(value, dict) and isinstance(value.get("events"), list):
        events = value["events"]
        for i, item in enumerate(events):
            events[i] = marked_item(item)
        return value
    return marked_item(value)


def loads_exact(data: bytes) -> Any:
    """Parse JSON text (UTF-8) exactly: see the module's description. Raises ``BadJson``."""
    fast_error: Exception | None = None
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        fast_error = exc
    else:
        try:
            if orjson.dumps(value) == data:
                return value
        except orjson.JSONEncodeError:  # nested deeper than orjson writes: read it the exact way
            pass
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadJson(f"not UTF-8: {exc.reason} at byte {exc.start}") from None
    decoder = _ExactDecoder()
    try:
        value = decoder.decode(text)
    except (ValueError, RecursionError) as exc:
        items = _items_one_by_one(text)
        if items is None:
            raise BadJson(f"not valid JSON: {fast_error or exc}") from None
        return {"events": items}
    return _mark_items(value) if decoder.duplicates else value


def _items_one_by_one(text: str) -> list[Any] | None:
    """A body ``{"events": [...]}`` that failed to parse as a whole, read item by item: an item no
    reader takes becomes an ``Unreadable``; None when the failure is in the body's own shape."""
    cut = _array_items(text)
    if cut is None or not _CLOSE_BODY.fullmatch(text, cut[1]):
        return None
    texts = cut[0]
    items: list[Any] = []
    for item_text in texts:
        try:
            items.append(loads_exact(item_text.encode("utf-8", errors="surrogatepass")))
        except (BadJson, RecursionError):
            items.append(Unreadable(_why_unreadable(item_text)))
    return items


def _why_unreadable(text: str) -> str:
    """Why the standard library's reader refuses ``text``, said for a client (bounded)."""
    try:
        _ExactDecoder().decode(text)
    except RecursionError:
        return "not JSON this server reads: nested deeper than about 1,000 levels"
    except ValueError as exc:
        return f"not JSON this server reads: {str(exc).partition('; use sys.')[0][:200]}"
    return "not JSON this server reads"  # pragma: no cover - orjson refused what the standard library took


def duplicate_key(value: Any) -> str | None:
    """The first key written twice in any object of ``value`` (None when there is none)."""
    pending = [value]
    while pending:
        top = pending.pop()
        if isinstance(top, dict):
            if isinstance(top, DuplicateKeys):
                return top.duplicate
            pending.extend(top.values())
        elif isinstance(top, list):
            pending.extend(top)
    return None


def first_inexact(value: Any, where: str = "") -> tuple[str, InexactNumber] | None:
    """The path and value of the first ``InexactNumber`` in ``value`` (None when there is none)."""
    pending: list[tuple[str, Any]] = [(where, value)]
    while pending:
        path, top = pending.pop()
        if isinstance(top, InexactNumber):
            # a key may hold a lone surrogate (JSON allows "\ud800") or a NUL, which no database text can hold
            safe = path[:200].encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\u0000")
            return safe, top
        if isinstance(top, dict):
            pending.extend((f"{path}.{k}" if path else str(k), v) for k, v in reversed(top.items()))
        elif isinstance(top, list):
            pending.extend((f"{path}[{i}]", v) for i, v in reversed(list(enumerate(top))))
    return None


_WS = " \t\r\n"
_OPEN_EVENTS = re.compile(r'[ \t\r\n]*\{[ \t\r\n]*"events"[ \t\r\n]*:[ \t\r\n]*\[')
_CLOSE_BODY = re.compile(r"\][ \t\r\n]*\}[ \t\r\n]*")
_SCAN = json.JSONDecoder()
# A string (possessive: never backtracks), or one bracket, or a quote that opens no closed string.
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*+"|[\[\]{}"]', re.DOTALL)
_SCALAR = re.compile(r'"(?:[^"\\]|\\.)*+"|[^,\]}{\[ \t\r\n"]+', re.DOTALL)


def value_end(text: str, pos: int) -> int | None:
    """Where the JSON value starting at ``pos`` ends, found from its brackets and strings only.

    Linear, and with no recursion: it finds the extent of a value the parsers refuse (too deep, a
    number too long), so that only that value is refused. None when the value never closes.
    """
    if pos >= len(text) or text[pos] not in "[{":
        scalar = _SCALAR.match(text, pos)
        return scalar.end() if scalar else None
    depth = 0
    for token in _TOKEN.finditer(text, pos):
        mark = token.group()
        if mark in "[{":
            depth += 1
        elif mark in "]}":
            depth -= 1
            if depth == 0:
                return token.end()
        elif mark == '"':
            return None  # a string that never closes
    return None


def array_item_texts(text: str) -> list[str] | None:
    """The text of each element of the ``events`` array of a body ``{"events": [...]}``, exactly as
    written; None when the body is not of that shape (its whole text is then what is kept)."""
    cut = _array_items(text)
    return None if cut is None else cut[0]


def _array_items(text: str) -> tuple[list[str], int] | None:
    """The texts of the ``events`` array's elements and where its closing bracket is."""
    start = _OPEN_EVENTS.match(text)
    if start is None:
        return None
    pos = start.end()
    texts: list[str] = []
    try:
        while True:
            while pos < len(text) and text[pos] in _WS:
                pos += 1
            if text.startswith("]", pos):
                return texts, pos
            if texts:
                if not text.startswith(",", pos):
                    return None
                pos += 1
                while pos < len(text) and text[pos] in _WS:
                    pos += 1
            try:
                _, end = _SCAN.raw_decode(text, pos)
            except (ValueError, RecursionError):
                found = value_end(text, pos)  # an item no parser takes: refused alone, later
                if found is None:
                    return None
                end = found
            texts.append(text[pos:end])
            pos = end
    except (ValueError, RecursionError):
        return None
