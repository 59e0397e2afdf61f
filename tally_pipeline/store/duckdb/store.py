"""The embedded default: a DuckDB file, opened while this process has work for it.

A DuckDB file admits one process at a time (even read-only), so nothing here keeps it open for
long when idle. Within a process the file has one owner, ``SharedFile``: the first unit of work opens
it (retrying with backoff while another process holds the lock), every thread's unit works on its own
cursor of that one connection, and it closes once nobody has used it for a moment. Opening and closing the file from
several threads at once (one connection per request) broke DuckDB's catalog: a post beside a health
check failed with "python_arrow_scan does not exist". ``:memory:`` keeps one database for the life of
the store (tests, benchmarks).
"""

from __future__ import annotations

import atexit
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import duckdb
import pyarrow as pa

from tally_pipeline.core.envelope import EventRecord
from tally_pipeline.store.base import (
    EventKey,
    RejectedRow,
    Store,
    StoreBusy,
    StoreError,
    StoreUnavailable,
    TransactionFailed,
    TransientConflict,
    UnitOfWork,
)
from tally_pipeline.store.duckdb.projection import DuckDBProjectionTables
from tally_pipeline.store.duckdb.usage_sql import DuckDBUsageSQL
from tally_pipeline.store.errors import Rule, map_exceptions
from tally_pipeline.store.migrations import MIGRATIONS_TABLE, migrations_for
from tally_pipeline.store.projection_tables import full_interval_rows

_UTC_US = pa.timestamp("us", tz="UTC")

T = TypeVar("T")


def _params(sql: str) -> str:
    """Queries are written with psycopg's ``%s``; DuckDB wants ``?``."""
    return sql.replace("%s", "?")


def _connect(path: str, threads: int | None = None) -> duckdb.DuckDBPyConnection:
    # threads is a setting of the database, not of one cursor: every cursor of the connection shares it.
    con = duckdb.connect(path, config={} if threads is None else {"threads": threads})
    # Timestamps are stored and shown in UTC whatever the machine's zone (ICU loads after connect);
    # GLOBAL, so that every cursor of this connection has it too.
    con.execute("SET GLOBAL TimeZone = 'UTC'")
    return con


class SharedFile:
    """This process's one connection to a DuckDB file, open while any thread has work for it.

    Every store object on the same file shares it (and its write lock), so two stores in one process
    queue their writers instead of racing them into a conflict at commit.

    The connection outlives its last user by ``linger_s``: each close checkpoints the file, and a
    checkpoint costs more the more the tables hold, so closing after every unit of work made each of a
    burst of small writes (a post and its dead-letter rows, an ingest then a refresh) cost more as the
    tables grew (``tally bench dead-letter``). A connection held ``max_hold_s`` closes at its next idle moment however
    busy this process is, so another process waiting for the file still gets its turn.
    """

    _by_path: dict[str, SharedFile] = {}
    _registry_lock = threading.Lock()
    linger_s = 0.5
    max_hold_s = 5.0

    def __init__(self, path: str):
        self.path = path
        self.write_lock = threading.RLock()  # one writer at a time in this process: a short wait, not an abort
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._con: duckdb.DuckDBPyConnection | None = None
        self._users = 0
        self._opened_at = 0.0
        self._idle_since = 0.0
        self._closer: threading.Thread | None = None

    @classmethod
    def of(cls, path: str) -> SharedFile:
        key = str(Path(path).resolve())
        with cls._registry_lock:
            shared = cls._by_path.get(key)
            if shared is None:
                shared = cls._by_path[key] = cls(path)
            return shared

    @contextmanager
    def cursor(self, open_file: Callable[[], duckdb.DuckDBPyConnection]) -> Iterator[duckdb.DuckDBPyConnection]:
        """A cursor of the shared connection, opened with ``open_file`` if no thread holds it."""
        with self._lock:
            if self._con is None:
                self._con = open_file()  # may wait for another process: every thread here needs the file anyway
                self._opened_at = time.monotonic()
            self._users += 1
            con = self._con
        try:
            cursor = con.cursor()
            try:
                yield cursor
            finally:
                cursor.close()
        finally:
            with self._lock:
                self._users -= 1
                if self._users == 0 and self._con is not None:
                    self._idle_since = time.monotonic()
                    if self._idle_since - self._opened_at >= self.max_hold_s or self.linger_s <= 0:
                        self._close_locked()  # held long enough: let other processes in now
                    else:
                        self._start_closer()
                        self._idle.notify()

    def close_if_idle(self) -> None:
        """Close the connection now unless a thread is using it (a store closed, the process ending)."""
        with self._lock:
            if self._users == 0:
                self._close_locked()

    def _close_locked(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None
            self._idle.notify_all()  # the closer thread, if waiting, has nothing left to do

    def _start_closer(self) -> None:
        if self._closer is None:
            self._closer = threading.Thread(target=self._close_when_idle, name=f"duckdb-closer {self.path}",
                                            daemon=True)
            self._closer.start()

    def _close_when_idle(self) -> None:
        """The closer thread: lives while the connection is open (a process with many files keeps no idle threads)."""
        with self._lock:
            while self._con is not None:
                if self._users:
                    self._idle.wait()
                    continue
                left = self._idle_since + self.linger_s - time.monotonic()
                if left > 0:
                    self._idle.wait(left)
                    continue
                self._close_locked()
            self._closer = None

    @classmethod
    def close_all_idle(cls) -> None:
        with cls._registry_lock:
            shared = list(cls._by_path.values())
        for one in shared:
            one.close_if_idle()


# A connection still lingering at exit is closed (and its file checkpointed) before the interpreter goes.
atexit.register(SharedFile.close_all_idle)


def _is_lock_error(exc: Exception) -> bool:
    text = str(exc)
    return "lock" in text.lower() and ("Could not set lock" in text or "Conflicting lock" in text)


def _transaction_error(exc: BaseException) -> StoreError:
    text = str(exc)
    return TransientConflict(text) if "conflict" in text.lower() else TransactionFailed(text)


#: DuckDB's errors inside a unit of work: a write-write conflict is retried; any other refusal of
#: the transaction fails the unit as the store's error (it is no row's fault, so the ledger poster
#: does not blame an entity for it). Opening the file has its own wait-and-retry in ``connection``.
DRIVER_ERRORS: tuple[Rule, ...] = ((duckdb.TransactionException, _transaction_error),)
#: At COMMIT DuckDB reports a concurrent writer's conflicting change (as a transaction or a
#: constraint error): a retry of the whole unit sees that change and resolves it.
COMMIT_ERRORS: tuple[Rule, ...] = (
    (duckdb.TransactionException, lambda exc: TransientConflict(str(exc))),
    (duckdb.ConstraintException, lambda exc: TransientConflict(str(exc))),
)


class DuckDBUnitOfWork(UnitOfWork):
    def __init__(self, con: duckdb.DuckDBPyConnection):
        self.con = con

    def execute(self, sql: str, params: Sequence[Any] = ()) -> duckdb.DuckDBPyConnection:
        return self.con.execute(_params(sql), list(params))

    def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self.execute(sql, params).fetchall()

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self.con.executemany(_params(sql), [list(r) for r in rows])

    def insert_events(self, records: Sequence[EventRecord], received_at: datetime) -> set[EventKey]:
        if not records:
            return set()
        batch = pa.table(
            {
                "event_id": [r.event_id for r in records],
                "event_type": [r.event_type for r in records],
                "verb": [r.verb for r in records],
                "cloud": [r.cloud for r in records],
                "resource_type": [r.resource_type for r in records],
                "resource_id": [r.resource_id for r in records],
                "project_id": pa.array([r.project_id for r in records], pa.string()),
                "occurred_at": pa.array([r.occurred_at for r in records], _UTC_US),
                "source": [r.source for r in records],
                "payload": [r.payload_json for r in records],
                "content_hash": [r.content_hash for r in records],
            }
        )
        self.con.register("_ingest_batch", batch)
        try:
            rows = self.con.execute(
                """
                INSERT INTO events (event_id, event_type, verb, cloud, resource_type, resource_id,
                                    project_id, occurred_at, source, payload, content_hash, received_at)
                SELECT event_id, event_type, verb, cloud, resource_type, resource_id,
                       project_id, occurred_at, source, payload::JSON, content_hash, ?
                FROM _ingest_batch
                ON CONFLICT DO NOTHING
                RETURNING cloud, event_id
                """,
                [received_at],
            ).fetchall()
            inserted = {(row[0], row[1]) for row in rows}
        finally:
            self.con.unregister("_ingest_batch")
        return inserted

    def content_hashes(self, keys: Sequence[EventKey]) -> dict[EventKey, str]:
        if not keys:
            return {}
        rows = self.con.execute(
            "SELECT e.cloud, e.event_id, e.content_hash FROM events e "
            "JOIN (SELECT unnest(?) AS cloud, unnest(?) AS event_id) k USING (cloud, event_id)",
            [[k[0] for k in keys], [k[1] for k in keys]],
        ).fetchall()
        return {(cloud, event_id): digest for cloud, event_id, digest in rows}

    def append_rejections(self, rows: Sequence[RejectedRow], received_at: datetime) -> None:
        # One INSERT ... SELECT from an Arrow table: executemany runs one statement per row (about 2 ms
        # each here, so a landing file of 65,000 refused items took minutes).
        text = pa.string()
        batch = pa.table({
            "reason": pa.array([r.reason for r in rows], text),
            "message": pa.array([r.message for r in rows], text),
            "origin": pa.array([r.origin for r in rows], text),
            "cloud": pa.array([r.cloud for r in rows], text),
            "event_id": pa.array([r.event_id for r in rows], text),
            "raw": pa.array([r.raw for r in rows], text),
        })
        self.con.register("_rejections_batch", batch)
        try:
            self.con.execute(
                "INSERT INTO rejected_events (received_at, reason, message, origin, cloud, event_id, raw) "
                "SELECT ?, reason, message, origin, cloud, event_id, raw FROM _rejections_batch",
                [received_at],
            )
        finally:
            self.con.unregister("_rejections_batch")


class DuckDBStore(Store):
    dialect = "duckdb"
    raw_bytes_sql = "strlen(raw)"
    #: Files this process has brought up to date: opening one again needs no migration check.
    _migrated: set[str] = set()

    def __init__(self, path: str | Path, *, migrate: bool = True, retry_budget_s: float = 30.0,
                 threads: int | None = None):
        """``threads``: DuckDB's worker threads (default: one per core). A file has one connection per process
        (``SharedFile``), so the store that opens it sets it for every store of that process on the file."""
        self.path = str(path)
        self.threads = threads
        self.url = f"duckdb://{self.path}"
        self.retry_budget_s = retry_budget_s
        self._memory: duckdb.DuckDBPyConnection | None = None
        self._pinned = threading.local()
        self._shared: SharedFile | None = None
        if self.path in ("", ":memory:"):
            self._memory = _connect(":memory:", threads)
            # One writer at a time inside this process: DuckDB would let two threads race and then
            # abort one at commit; queueing them here turns that into a short wait instead.
            self._write_lock = threading.RLock()
        else:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            self._shared = SharedFile.of(self.path)
            self._write_lock = self._shared.write_lock
        known = self._memory is None and Path(self.path).exists() and str(Path(self.path).resolve()) in self._migrated
        if migrate and not known:
            self.migrate()
            if self._memory is None:
                self._migrated.add(str(Path(self.path).resolve()))

    @contextmanager
    def session(self) -> Iterator[None]:
        """Keep one connection open for this thread across several units of work.

        For a burst of work in one process (a benchmark, a Dagster step, the demo) this saves the
        open/close of the file per unit; other processes wait for the whole session.
        """
        if getattr(self._pinned, "con", None) is not None or self._memory is not None:
            yield
            return
        with self._open() as con:
            self._pinned.con = con
            try:
                yield
            finally:
                self._pinned.con = None

    @contextmanager
    def connection(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection for one unit of work (the session's, if one is open in this thread)."""
        pinned = getattr(self._pinned, "con", None)
        if pinned is not None:
            cursor = pinned.cursor()
            try:
                yield cursor
            finally:
                cursor.close()
            return
        with self._open() as con:
            yield con

    @contextmanager
    def _open(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A cursor on the database: the process's shared connection to the file (see ``SharedFile``)."""
        if self._memory is not None:
            cursor = self._memory.cursor()
            try:
                yield cursor
            finally:
                cursor.close()
            return
        assert self._shared is not None
        with self._shared.cursor(self._open_file) as cursor:
            yield cursor

    def _open_file(self) -> duckdb.DuckDBPyConnection:
        """Open the file, waiting with backoff while another process holds it."""
        deadline = time.monotonic() + self.retry_budget_s
        delay = 0.01
        while True:
            try:
                con = _connect(self.path, self.threads)
                break
            except duckdb.IOException as exc:
                if not _is_lock_error(exc):
                    raise StoreUnavailable(f"cannot open {self.path}: {exc}") from exc
                if time.monotonic() + delay > deadline:
                    raise StoreBusy(
                        f"{self.path} stayed locked by another process for {self.retry_budget_s:.0f}s "
                        "(an embedded DuckDB file admits one process at a time; use Postgres for concurrent use)"
                    ) from exc
                time.sleep(delay)
                delay = min(delay * 2, 0.25)
        return con

    @contextmanager
    def unit_of_work(self) -> Iterator[DuckDBUnitOfWork]:
        with self._write_lock, self.connection() as con:
            con.execute("BEGIN TRANSACTION")
            try:
                with map_exceptions(DRIVER_ERRORS):
                    yield DuckDBUnitOfWork(con)
            except BaseException:
                con.execute("ROLLBACK")
                raise
            with map_exceptions(COMMIT_ERRORS):
                con.execute("COMMIT")

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self.connection() as con:
            return con.execute(_params(sql), list(params)).fetchall()

    def usage_sql(self) -> DuckDBUsageSQL:
        return DuckDBUsageSQL()

    def with_projection_tables(self, work: Callable[[DuckDBProjectionTables], T], *, full: bool) -> T:
        # writers are serialised here, so the fold's own bounds read is enough to see what is pending
        return self.run(lambda uow: work(DuckDBProjectionTables(uow)))

    def load_intervals(self, rows: Sequence[tuple[Any, ...]]) -> None:
        self.run(lambda uow: DuckDBProjectionTables(uow).replace([], [], full_interval_rows(rows)))

    def applied_migrations(self) -> list[str]:
        with self.connection() as con:
            con.execute(MIGRATIONS_TABLE)
            return [row[0] for row in con.execute("SELECT name FROM schema_migrations ORDER BY version").fetchall()]

    def migrate(self) -> list[str]:
        applied: list[str] = []
        with self._write_lock, self.connection() as con:
            con.execute(MIGRATIONS_TABLE)
            done = {row[0] for row in con.execute("SELECT version FROM schema_migrations").fetchall()}
            for migration in migrations_for(self.dialect):
                if migration.version in done:
                    continue
                con.execute("BEGIN TRANSACTION")
                try:
                    con.execute(migration.sql)
                    con.execute(
                        "INSERT INTO schema_migrations (version, name) VALUES (?, ?)",
                        [migration.version, migration.name],
                    )
                    con.execute("COMMIT")
                except BaseException:
                    con.execute("ROLLBACK")
                    raise
                applied.append(migration.name)
        return applied

    def close(self) -> None:
        if self._memory is not None:
            self._memory.close()
            self._memory = None
        elif self._shared is not None:
            self._shared.close_if_idle()
