"""The store contract: one interface, a DuckDB and a Postgres implementation behind it.

A ``UnitOfWork`` is one transaction on one connection. ``Store.run`` opens one, hands it to a
function, commits, and retries the whole unit when the backend reports a transient conflict
(a DuckDB file held by another process, a write-write conflict, a Postgres serialization failure
or deadlock). Everything that writes goes through ``run``; nothing holds a connection longer.
"""

from __future__ import annotations

import abc
import random
import time
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from tally_pipeline.core.envelope import EventRecord

# The error types stay importable from here (re-exported: the store's vocabulary).
from tally_pipeline.store.errors import StoreBusy as StoreBusy
from tally_pipeline.store.errors import StoreError as StoreError
from tally_pipeline.store.errors import StoreUnavailable as StoreUnavailable
from tally_pipeline.store.errors import TransactionFailed as TransactionFailed
from tally_pipeline.store.errors import TransientConflict as TransientConflict

if TYPE_CHECKING:
    from tally_pipeline.store.projection_tables import ProjectionTables
    from tally_pipeline.store.usage_sql import UsageSQL

T = TypeVar("T")
#: An event's identity: (cloud, event_id). Dedup, conflicts and lookups all go by it.
EventKey = tuple[str, str]
Dialect = Literal["duckdb", "postgres"]


@dataclass(frozen=True, slots=True)
class RejectedRow:
    """One dead-letter row to write: why, and the item exactly as received."""

    reason: str
    message: str
    origin: str
    raw: str | None
    cloud: str | None = None
    event_id: str | None = None
    #: duplicate_conflict rows only: the conflicting copy's content hash. One row is kept per
    #: (cloud, event_id, conflict_key); a copy received again adds to its ``repeats``.
    conflict_key: str | None = None


#: How much of each raw item a dead-letter listing carries (characters): a page of 1000 rows stays a
#: few MB however large the items were; the whole item is fetched one at a time (``rejected_raw``).
RAW_PREFIX_CHARS = 1024


@dataclass(frozen=True, slots=True)
class RejectedEntry:
    """One dead-letter row as listed: ``raw`` is at most RAW_PREFIX_CHARS of the item as received."""

    id: int
    received_at: datetime
    reason: str
    message: str
    origin: str
    cloud: str | None
    event_id: str | None
    raw: str | None
    raw_bytes: int | None = None  # the whole item's size in UTF-8 bytes
    raw_truncated: bool = False
    repeats: int = 1  # how many times this row's item was received (duplicate_conflict rows)
    last_received_at: datetime | None = None


class UnitOfWork(abc.ABC):
    """One transaction. Methods are the only SQL that writes the event log and the dead letter."""

    @abc.abstractmethod
    def insert_events(self, records: Sequence[EventRecord], received_at: datetime) -> set[EventKey]:
        """Insert records whose (cloud, event_id) is new; return the keys inserted. Held keys are left alone."""

    def insert_event_stream(
        self, keys: Sequence[EventKey], records: Iterable[EventRecord], received_at: datetime,
        meanwhile: Callable[[], None] | None = None,
    ) -> set[EventKey]:
        """``insert_events`` for records that arrive one at a time, in (cloud, event_id) order.

        ``keys`` is sorted and holds the key of every record that can come (and maybe more);
        ``records`` may be iterated again, from the start. Returns the keys inserted. ``meanwhile``
        is CPU work of the caller's (validating its next batch) that a store may do while the
        database finishes this one. The ingest core uses it only with a store whose
        ``streams_events`` is true.
        """
        return self.insert_events(list(records), received_at)

    def pipelined(self) -> AbstractContextManager[object]:
        """Statements sent inside go to the database together, in one round trip where it can
        (Postgres' pipeline mode); their results are read when the block ends. No COPY inside."""
        return nullcontext()

    @abc.abstractmethod
    def content_hashes(self, keys: Sequence[EventKey]) -> dict[EventKey, str]:
        """The stored content hash of each given (cloud, event_id) that exists."""

    def insert_rejections(self, rows: Sequence[RejectedRow], received_at: datetime) -> None:
        """Append rows to the dead letter (a duplicate_conflict row already held adds to its ``repeats``)."""
        conflicts = [r for r in rows if r.conflict_key is not None]
        if conflicts:
            self.upsert_conflicts(conflicts, received_at)
        others = [r for r in rows if r.conflict_key is None]
        if others:
            self.append_rejections(others, received_at)

    @abc.abstractmethod
    def append_rejections(self, rows: Sequence[RejectedRow], received_at: datetime) -> None:
        """Append rows without a conflict key to the dead letter, as they are."""

    def upsert_conflicts(self, rows: Sequence[RejectedRow], received_at: datetime) -> None:
        """Write duplicate_conflict rows: one per (cloud, event_id, conflict_key), counting repeats.

        Equal keys in ``rows`` are merged first (one statement may not touch a row twice); keys go
        in order so racing writers lock them in the same order.
        """
        merged: dict[tuple[str | None, str | None, str | None], tuple[RejectedRow, int]] = {}
        for row in rows:
            key = (row.cloud, row.event_id, row.conflict_key)
            first, n = merged.get(key, (row, 0))
            merged[key] = (first, n + 1)
        params = [
            (received_at, r.reason, r.message, r.origin, r.cloud, r.event_id, r.raw, r.conflict_key, n, received_at)
            for key, (r, n) in sorted(merged.items(), key=lambda kv: tuple(p or "" for p in kv[0]))
        ]
        self.executemany(
            "INSERT INTO rejected_events (received_at, reason, message, origin, cloud, event_id, raw, conflict_key, "
            "repeats, last_received_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
            "ON CONFLICT (cloud, event_id, conflict_key) DO UPDATE SET "
            "repeats = coalesce(rejected_events.repeats, 1) + excluded.repeats, "
            "last_received_at = excluded.last_received_at",
            params,
        )

    def note_activity(self, counts: dict[tuple[str, str], int], received_at: datetime) -> None:
        """Add stored-event counts per (cloud, source) to ``cloud_activity``, in key order (no deadlocks)."""
        for (cloud, source), n in sorted(counts.items()):
            collector = source == "collector"
            self.execute(
                "INSERT INTO cloud_activity AS a (cloud, first_collector_event, last_collector_event, "
                "collector_events, reconciliation_events) VALUES (%s, %s, %s, %s, %s) "
                "ON CONFLICT (cloud) DO UPDATE SET "
                "first_collector_event = coalesce(a.first_collector_event, excluded.first_collector_event), "
                "last_collector_event = coalesce(excluded.last_collector_event, a.last_collector_event), "
                "collector_events = a.collector_events + excluded.collector_events, "
                "reconciliation_events = a.reconciliation_events + excluded.reconciliation_events",
                (cloud, received_at if collector else None, received_at if collector else None,
                 n if collector else 0, 0 if collector else n),
            )

    @abc.abstractmethod
    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """Run one parameterised statement (``%s`` placeholders) in this transaction."""

    @abc.abstractmethod
    def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run a statement and return its rows."""

    @abc.abstractmethod
    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """Run one statement once per row of parameters."""


class Store(abc.ABC):
    """A database holding the tally tables."""

    dialect: Dialect
    url: str
    #: How long ``run`` keeps retrying a busy or conflicting unit before giving up with StoreBusy.
    retry_budget_s: float = 30.0
    #: SQL for the UTF-8 byte length of a text column ``raw``.
    raw_bytes_sql: str = "octet_length(raw)"
    #: Whether the ingest core hands a batch's events to ``UnitOfWork.insert_event_stream`` while it
    #: is still validating the batch, rather than validating first and calling ``insert_events``.
    streams_events: bool = False
    #: Whether transactions that write disjoint rows run at once (Postgres) or one after another
    #: (DuckDB admits one writer): the poster posts batches in parallel only where they do.
    parallel_writes: bool = False

    @abc.abstractmethod
    @contextmanager
    def unit_of_work(self) -> Iterator[UnitOfWork]:
        """One transaction: committed when the block ends, rolled back on an exception."""

    @contextmanager
    def session(self) -> Iterator[None]:
        """Hold resources across several units of work in this thread (DuckDB: one open file)."""
        yield

    def run(self, work: Callable[[UnitOfWork], T]) -> T:
        """Run ``work`` in a unit of work, retrying the whole unit on transient conflicts."""
        deadline = time.monotonic() + self.retry_budget_s
        delay = 0.005
        while True:
            try:
                with self.unit_of_work() as uow:
                    return work(uow)
            except TransientConflict as exc:
                if time.monotonic() + delay > deadline:
                    raise StoreBusy(f"database busy for {self.retry_budget_s:.0f}s: {exc}") from exc
                time.sleep(delay * (0.5 + random.random()))  # jitter spreads out competing writers
                delay = min(delay * 2, 0.5)

    @abc.abstractmethod
    def migrate(self) -> list[str]:
        """Apply pending numbered migrations from ``sql/<dialect>/``; return the names applied."""

    @abc.abstractmethod
    def applied_migrations(self) -> list[str]:
        """Names of the migrations already applied, oldest first."""

    def pending_migrations(self) -> list[str]:
        """Migrations shipped with this version but not yet applied."""
        from tally_pipeline.store.migrations import migrations_for

        applied = set(self.applied_migrations())
        return [m.name for m in migrations_for(self.dialect) if m.name not in applied]

    def require_current_schema(self) -> None:
        """Fail clearly when the database lags the code (Postgres is migrated by ``tally db migrate``)."""
        pending = self.pending_migrations()
        if pending:
            raise StoreError(
                f"database {self.url} is missing migrations {', '.join(pending)}: run `tally db migrate`"
            )

    @abc.abstractmethod
    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run a read-only parameterised query (``%s`` placeholders) and return all rows."""

    def query_chunks(self, sql: str, params: Sequence[Any] = (), size: int = 1000) -> Generator[list[tuple[Any, ...]], None, None]:
        """``query``'s rows, ``size`` at a time. A store whose reads can stream hands out the first
        chunk before the query has run to its end (Postgres: a server-side cursor); close the iterator
        (or read it to its end) to give back what it holds."""
        rows = self.query(sql, params)
        for start in range(0, len(rows), size):
            yield rows[start : start + size]

    def ping(self) -> None:
        self.query("SELECT 1")

    def checkpoint(self) -> None:
        """Write every change so far into the database's files now (``CHECKPOINT``).

        Benchmarks call it before each timed phase, so that no phase pays for the pages an earlier
        one left dirty, or runs into a checkpoint the WAL an earlier one wrote set off.
        """
        self.run(lambda uow: uow.execute("CHECKPOINT"))

    def resource_events_filter(self, key: tuple[str, str, str]) -> tuple[str, list[Any]]:
        """A WHERE clause selecting one resource's rows of ``events`` (columns unqualified), and its
        parameters: written so that it reaches this store's index of a resource's events."""
        return "cloud = %s AND resource_type = %s AND resource_id = %s", list(key)

    @abc.abstractmethod
    def usage_sql(self) -> UsageSQL:
        """The meter rule and row sets in this store's dialect, for statements that compute usage."""

    @abc.abstractmethod
    def with_projection_tables(self, work: Callable[[ProjectionTables], T], *, full: bool) -> T | None:
        """Run ``work`` on this backend's projection tables in one unit of work (a refresh or a rebuild).

        None, without running it, when ``full`` is false and the backend can tell cheaply that no
        event is pending.
        """

    @abc.abstractmethod
    def load_intervals(self, rows: Sequence[tuple[Any, ...]]) -> None:
        """Append ``resource_intervals`` rows as given, through the projection's writer, in one unit of work.

        A row is (cloud, resource_type, resource_id, interval_no, lifecycle_no, project_id, size as
        JSON text, start_at, end_at[, platform_status]). Benchmarks seed usage this way, without
        events to fold.
        """

    def close(self) -> None:  # noqa: B027 - backends without resources need nothing
        """Release connections."""

    # Reads shared by both backends: plain SQL that means the same in each dialect.

    def event_count(self) -> int:
        return int(self.query("SELECT count(*) FROM events")[0][0])

    def rejected(
        self,
        *,
        cloud: str | None = None,
        reason: str | None = None,
        since: datetime | None = None,
        before_id: int | None = None,
        limit: int = 100,
    ) -> list[RejectedEntry]:
        """The dead letter, newest first, filtered; ``before_id`` continues a previous page.

        Each raw item is cut to RAW_PREFIX_CHARS in the database, so a page never loads whole items.
        """
        clauses: list[str] = []
        params: list[object] = []
        for column, value in (("cloud", cloud), ("reason", reason)):
            if value is not None:
                clauses.append(f"{column} = %s")
                params.append(value)
        if since is not None:
            clauses.append("received_at >= %s")
            params.append(since)
        if before_id is not None:
            clauses.append("id < %s")
            params.append(before_id)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        rows = self.query(
            f"SELECT id, received_at, reason, message, origin, cloud, event_id, substr(raw, 1, {RAW_PREFIX_CHARS}), "
            f"{self.raw_bytes_sql}, coalesce(length(raw) > {RAW_PREFIX_CHARS}, false), coalesce(repeats, 1), "
            "coalesce(last_received_at, received_at) "
            f"FROM rejected_events {where} ORDER BY id DESC LIMIT %s",
            [*params, limit],
        )
        return [RejectedEntry(*row) for row in rows]

    def purge_rejected(self, before: datetime) -> int:
        """Delete dead-letter rows last received before ``before``; return how many went."""

        def purge(uow: UnitOfWork) -> int:
            where = "coalesce(last_received_at, received_at) < %s"
            n = int(uow.fetchall(f"SELECT count(*) FROM rejected_events WHERE {where}", [before])[0][0])
            if n:
                uow.execute(f"DELETE FROM rejected_events WHERE {where}", [before])
            return n

        return self.run(purge)

    def rejected_raw(self, rejected_id: int) -> tuple[bool, str | None]:
        """One dead-letter row's whole raw item: (found, raw)."""
        rows = self.query("SELECT raw FROM rejected_events WHERE id = %s", [rejected_id])
        return (True, rows[0][0]) if rows else (False, None)

    def rejected_raw_size(self, rejected_id: int) -> tuple[bool, int | None]:
        """Whether the dead-letter row exists, and its raw item's size in UTF-8 bytes (None: no raw item)."""
        rows = self.query(f"SELECT {self.raw_bytes_sql} FROM rejected_events WHERE id = %s", [rejected_id])
        return (True, rows[0][0]) if rows else (False, None)

    def rejected_raw_part(self, rejected_id: int, start: int, chars: int) -> str:
        """``chars`` characters of a dead-letter row's raw item from character ``start`` (0-based): a
        large item is read a slice at a time, never whole."""
        rows = self.query("SELECT substr(raw, %s, %s) FROM rejected_events WHERE id = %s", [start + 1, chars, rejected_id])
        return (rows[0][0] or "") if rows else ""

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
