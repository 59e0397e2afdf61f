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
    max_rejected_rows: int = 1000  # refused items of one file given a dead-letter row each; the rest counted
    max_rejected_bytes: int = 16 * 1024 * 1024  # of those rows' texts and messages, per file


def rejection_summary(path_name: str, not_kept: dict[str, int], limits: LandingLimits) -> str:
    """The message of the one dead-letter row that counts a file's refused items beyond its bounds."""
    total = sum(not_kept.values())
    reasons = ", ".join(f"{reason} {n}" for reason, n in sorted(not_kept.items(), key=lambda kv: (-kv[1], kv[0])))
    return (f"{TOO_MANY_REJECTIONS}: {path_name}: {total} more refused items than the dead letter keeps for one file "
            f"(landing.max_rejected_rows {limits.max_rejected_rows}, landing.max_rejected_bytes "
            f"{limits.max_rejected_bytes}); counted here, not kept one by one: {reasons}")


#: The reason of the one row that counts what a landing file refused beyond its bounds.
TOO_MANY_REJECTIONS = "too_many_rejections"


#: The documented defaults (docs/operations.md).
DEFAULT_LIMITS = LandingLimits()
