"""The verb rule: how an event type maps to its effect on a resource's state.

One table-driven function, used by validation, the fold, the stores and the docs' examples.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Literal

Verb = Literal["create", "update", "note", "delete"]

# Fold order within one instant: a create before an update before a note before a delete, so an
# event pair stamped with the same time still builds a resource before ending it.
VERB_RANK: dict[str, int] = {"create": 0, "update": 1, "note": 2, "delete": 3}

# Checked in order; the first matching rule decides.
_RULES: tuple[tuple[str, str, Verb], ...] = (
    ("last", "start", "note"),
    ("last", "error", "note"),
    ("any", "delete", "delete"),
    ("any", "create", "create"),
)


@lru_cache(maxsize=4096)
def verb_of(event_type: str) -> Verb:
    """Return the verb of a dotted event type (e.g. ``volume.create.start`` is a ``note``)."""
    tokens = event_type.split(".")
    for where, token, verb in _RULES:
        if (where == "last" and tokens[-1] == token) or (where == "any" and token in tokens):
            return verb
    return "update"
