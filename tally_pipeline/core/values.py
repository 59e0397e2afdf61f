"""Values no event can hold, named by what is wrong with them rather than where they were found.

Two kinds reach us in otherwise well-formed JSON: a number beyond what is stored (``1e400`` and
``-1e400`` read as infinities, ``1e-400`` as zero, an integer beyond 64 bits) and a text no UTF-8
can carry (JSON allows a lone surrogate, ``"\\ud800"``). Both are the sender's data, not a bug of
ours, so they get reasons of their own on every path: ``number_out_of_range`` and ``invalid_text``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tally_pipeline.core.jsontext import InexactNumber

NUMBER_OUT_OF_RANGE = "number_out_of_range"
INVALID_TEXT = "invalid_text"
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class BadValue:
    reason: str
    path: str
    detail: str

    def __str__(self) -> str:
        return f"{self.reason}: {self.path}: {self.detail}" if self.path else f"{self.reason}: {self.detail}"


def is_text(value: str) -> bool:
    """Whether ``value`` has a UTF-8 form (no lone surrogate)."""
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def number_problem(value: Any) -> str | None:
    """Why a number cannot be stored as it was written because of its magnitude, or None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        if INT64_MIN <= value <= INT64_MAX:
            return None
        return f"{str(value)[:40]} is beyond a 64-bit integer's range"
    if isinstance(value, float):
        return "infinity is beyond a 64-bit float's range" if math.isinf(value) else None
    if isinstance(value, InexactNumber) and value.out_of_range():
        return f"{value.text[:40]} is beyond a 64-bit float's range"
    return None


def first_bad_value(value: Any, where: str = "") -> BadValue | None:
    """The first number out of range or text without UTF-8 in ``value`` (keys included), or None."""
    pending: list[tuple[str, Any]] = [(where, value)]
    while pending:
        path, top = pending.pop()
        shown = path[:200].encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\u0000")
        if isinstance(top, str):
            if not is_text(top):
                return BadValue(INVALID_TEXT, shown, "a lone surrogate (e.g. \\ud800) is not text")
            continue
        problem = number_problem(top)
        if problem is not None:
            return BadValue(NUMBER_OUT_OF_RANGE, shown, problem)
        if isinstance(top, dict):
            for key in top:
                if isinstance(key, str) and not is_text(key):
                    return BadValue(INVALID_TEXT, shown or "key", "a key holds a lone surrogate (e.g. \\ud800)")
            pending.extend((f"{path}.{k}" if path else str(k), v) for k, v in reversed(top.items()))
        elif isinstance(top, list):
            pending.extend((f"{path}[{i}]", v) for i, v in reversed(list(enumerate(top))))
    return None
