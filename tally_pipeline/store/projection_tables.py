"""The projection's reads and writes, one implementation per backend (``duckdb.projection``, ``postgres.projection``).

``tally_pipeline.services.projection`` decides what to fold and folds it; these classes are the only code that
reads events for the fold and writes ``current_resources``, ``resource_intervals`` and the
watermark. Each works inside one unit of work. Every read here is bounded by what changed — by
``seq`` above the watermark, or by the keys of the resources touched — except the SQL fold, which
folds whole histories for rebuilds and bulk loads.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from tally_pipeline.store.base import Store

Key = tuple[str, str, str]

KEY = "cloud, resource_type, resource_id"
STATE_COLUMNS = ("cloud", "resource_type", "resource_id", "status", "project_id", "size", "created_at",
                 "deleted_at", "last_event_at", "last_seq", "event_count", "platform_status")
INTERVAL_COLUMNS = ("cloud", "resource_type", "resource_id", "interval_no", "lifecycle_no", "project_id", "size",
                    "start_at", "end_at", "platform_status")
# A fold row is (cloud, resource_type, resource_id, event_id, verb, occurred_at, project_id, size, seq,
# status), ``size`` as JSON text or already decoded, ``status`` the payload's (NULL when none or empty).


def full_interval_rows(rows: Iterable[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Interval rows as ``INTERVAL_COLUMNS`` wants them: a row given without its trailing
    ``platform_status`` (a benchmark's seed, written before statuses existed) gets none."""
    width = len(INTERVAL_COLUMNS)
    return [row if len(row) == width else (*row, *([None] * (width - len(row)))) for row in rows]


@dataclass(frozen=True, slots=True)
class StoredFold:
    """A resource's stored state, plus what its intervals say about where the fold left off."""

    key: Key
    status: str
    project_id: str | None
    size: Any  # JSON text or decoded
    created_at: datetime | None
    deleted_at: datetime | None
    last_event_at: datetime
    last_seq: int
    event_count: int
    platform_status: str | None
    last_interval_no: int | None  # None: no interval
    last_lifecycle_no: int | None  # lifecycle of the last interval
    open_start: datetime | None  # start of the interval with no end, if any


class ProjectionTables(Protocol):
    #: Up to this many pending events a refresh folds in Python (resuming stored folds, re-folding
    #: only late resources); above it, it re-folds every touched resource in SQL.
    python_fold_max: int

    def bounds(self) -> tuple[int, int]:
        """(watermark, high): every event with watermark < seq <= high is committed and not folded yet."""

    def pending_count(self, watermark: int, high: int) -> int:
        """How many events wait to be folded."""

    def pending_rows(self, watermark: int, high: int) -> Iterator[tuple[Any, ...]]:
        """The pending events as fold rows, grouped by key."""

    def stored(self, keys: Sequence[Key]) -> list[StoredFold]:
        """The stored fold of each of ``keys`` that has one."""

    def histories(self, keys: Sequence[Key]) -> Iterator[tuple[Any, ...]]:
        """Every event of ``keys`` as fold rows, grouped by key (through the resource index on Postgres)."""

    def replace(self, cuts: Sequence[tuple[Key, int]], states: Iterable[tuple[Any, ...]], intervals: Iterable[tuple[Any, ...]]) -> None:
        """For each (key, n): drop its state row and its intervals numbered n or more; then write the rows."""

    def fold_in_sql(self, watermark: int, high: int, *, full: bool) -> int:
        """Re-fold in SQL every resource (``full``) or those with pending events; return how many."""

    def set_watermark(self, high: int) -> None:
        """Record that every event with seq <= high is folded."""


def read_watermark(store: Store) -> int:
    """The highest ``seq`` folded (no lock taken)."""
    return int(store.query("SELECT watermark FROM projection_state WHERE name = 'resources'")[0][0])


def stored_last_seq(store: Store) -> int:
    """The highest ``seq`` handed out so far (Postgres: the sequence, committed or not)."""
    if store.dialect == "postgres":
        row = store.query("SELECT pg_sequence_last_value(pg_get_serial_sequence('events', 'seq')::regclass)")
    else:
        row = store.query("SELECT max(seq) FROM events")
    return int(row[0][0] or 0)


def pending(store: Store) -> bool:
    """Whether events were stored since the last refresh (no lock taken)."""
    return stored_last_seq(store) > read_watermark(store)
