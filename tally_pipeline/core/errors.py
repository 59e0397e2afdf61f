"""The root of every error tally raises on purpose.

Each public error also keeps the built-in base that says what kind of failure it is (``ValueError``
for bad input, ``RuntimeError`` for a failed operation, ``KeyError`` for an unknown name), so a caller
may catch either the kind or everything tally raises. The tree is drawn in docs/architecture.md.
"""

from __future__ import annotations


class TallyError(Exception):
    """Something tally detected and explains: bad input, a refused or failed operation."""
