"""What one landing file may hold: the ``landing:`` settings as the reader takes them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LandingLimits:
    """What one landing file may hold (the ``landing:`` settings; docs/operations.md)."""

    max_item_bytes: int = 5 * 1024 * 1024  # a line, or one element of a document: the API's body limit
    max_file_bytes: int = 4 * 1024**3  # what a file may hold once decompressed
    max_ratio: int = 100  # decompressed over compressed size of a gzip file (JSON compresses 5-20 times)
    excerpt_bytes: int = 64 * 1024  # of a refused item, kept in the dead letter
    follow_symlinks: bool = False  # a file given by a symlink is refused unless set


#: The documented defaults (docs/operations.md).
DEFAULT_LIMITS = LandingLimits()
