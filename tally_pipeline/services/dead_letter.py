"""Dead-letter retention: rows older than the configured retention are deleted.

One function, called by the daily Dagster schedule (``defs/retention.py``) and by
``tally dead-letter purge``. A duplicate_conflict row counts from the last copy received.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from tally_pipeline.core.timeutil import format_rfc3339, to_utc
from tally_pipeline.store.base import Store


@dataclass(frozen=True)
class PurgeResult:
    cutoff: datetime
    deleted: int

    def as_json(self) -> dict[str, Any]:
        return {"cutoff": format_rfc3339(self.cutoff), "deleted": self.deleted}


def purge_dead_letter(store: Store, retention_days: int, now: datetime) -> PurgeResult:
    """Delete the dead-letter rows last received more than ``retention_days`` before ``now``."""
    if retention_days < 1:
        raise ValueError(f"retention_days must be at least 1, got {retention_days}")
    cutoff = to_utc(now) - timedelta(days=retention_days)
    return PurgeResult(cutoff, store.purge_rejected(cutoff))
