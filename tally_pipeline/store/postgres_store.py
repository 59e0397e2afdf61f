"""The production store: PostgreSQL through psycopg 3 and a connection pool.

Writes stage a batch with COPY and move it with one set-based INSERT … ON CONFLICT DO NOTHING,
in event_id order so two writers racing overlapping batches always lock rows in the same order
and never deadlock.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg import postgres
from psycopg.adapt import Dumper
from psycopg.pq import Format
from psycopg_pool import ConnectionPool, PoolTimeout

from tally_pipeline.core.envelope import EventRecord
from tally_pipeline.store.base import (
    RejectedRow,
    Store,
    StoreUnavailable,
    TransientConflict,
    UnitOfWork,
)
from tally_pipeline.store.migrations import MIGRATIONS_TABLE, migrations_for

_MIGRATION_LOCK = 0x7A11_0001  # advisory lock id: one migrator at a time

# Ingest holds this advisory lock shared until commit; a projection refresh takes it exclusively for
# an instant to learn a sequence value below which every event is committed.
INGEST_LOCK = 0x7A11_0002

_STAGE = """
CREATE TEMP TABLE IF NOT EXISTS _ingest_stage (
    event_id TEXT, event_type TEXT, verb TEXT, cloud TEXT, resource_type TEXT, resource_id TEXT,
    project_id TEXT, occurred_at TIMESTAMPTZ, source TEXT, payload TEXT, content_hash TEXT
) ON COMMIT DELETE ROWS
"""


_EVENT_COPY_TYPES = ["text"] * 7 + ["timestamptz", "text", "jsonb", "text", "timestamptz"]


class _JsonText(str):
    """Registration key of the dumper below: COPY picks dumpers by column type (jsonb), not by value."""


class _JsonTextDumper(Dumper):
    """Binary jsonb from JSON text, without parsing and re-serialising it in Python."""

    format = Format.BINARY
    oid = postgres.types["jsonb"].oid

    def dump(self, obj: str) -> bytes:
        return b"\x01" + obj.encode()


def _translate(exc: Exception) -> Exception:
    """Map driver errors to the store's: transient conflicts are retried, lost connections are 503s."""
    if isinstance(exc, (pg_errors.SerializationFailure, pg_errors.DeadlockDetected)):
        return TransientConflict(str(exc))
    if isinstance(exc, (psycopg.OperationalError, PoolTimeout)):
        return StoreUnavailable(f"PostgreSQL unavailable: {exc}")
    return exc


class PostgresUnitOfWork(UnitOfWork):
    def __init__(self, conn: psycopg.Connection):
        self.conn = conn
        self.cur = conn.cursor()
        self._binary: psycopg.Cursor | None = None

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> psycopg.Cursor:
        return self.cur.execute(sql, params)

    def fetchall(self, sql: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        return self.cur.execute(sql, params).fetchall()

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self.cur.executemany(sql, rows)

    def insert_events(self, records: Sequence[EventRecord], received_at: datetime) -> set[str]:
        """Store the records whose event_id is new.

        The fast path copies the new rows straight into ``events`` after asking which ids are already
        held. A writer racing us for one of them makes the copy fail on the primary key; the batch
        then rolls back to a savepoint and takes the slow path, a staged ``INSERT … ON CONFLICT DO
        NOTHING``. Either way rows go in event_id order, so racing writers lock in the same order.
        """
        if not records:
            return set()
        ordered = sorted(records, key=lambda r: r.event_id)
        held = self.cur.execute(
            "SELECT pg_advisory_xact_lock_shared(%s), ARRAY(SELECT event_id FROM events WHERE event_id = ANY(%s))",
            (INGEST_LOCK, [r.event_id for r in ordered]),
        ).fetchone()[1]
        held = set(held or ())
        fresh = [r for r in ordered if r.event_id not in held]
        if not fresh:
            return set()
        try:
            with self.conn.transaction():  # a savepoint: the fallback keeps the rest of the unit
                self._copy(fresh, received_at)
            return {r.event_id for r in fresh}
        except pg_errors.UniqueViolation:
            return self._insert_staged(fresh, received_at)

    def _copy(self, records: Sequence[EventRecord], received_at: datetime) -> None:
        # Binary COPY: a third cheaper per row than text. The payload is already JSON text; the
        # cursor's own jsonb dumper sends it as is (binary jsonb is a version byte, then the text).
        cursor = self._binary_cursor()
        with cursor.copy(
            "COPY events (event_id, event_type, verb, cloud, resource_type, resource_id, project_id, "
            "occurred_at, source, payload, content_hash, received_at) FROM STDIN (FORMAT BINARY)"
        ) as copy:
            copy.set_types(_EVENT_COPY_TYPES)
            for r in records:
                copy.write_row(
                    (r.event_id, r.event_type, r.verb, r.cloud, r.resource_type, r.resource_id,
                     r.project_id, r.occurred_at, r.source, r.payload_json, r.content_hash, received_at)
                )

    def _binary_cursor(self) -> psycopg.Cursor:
        if self._binary is None:
            self._binary = self.conn.cursor()
            self._binary.adapters.register_dumper(_JsonText, _JsonTextDumper)
        return self._binary

    def _insert_staged(self, records: Sequence[EventRecord], received_at: datetime) -> set[str]:
        cur = self.cur
        cur.execute(_STAGE)
        with cur.copy(
            "COPY _ingest_stage (event_id, event_type, verb, cloud, resource_type, resource_id, "
            "project_id, occurred_at, source, payload, content_hash) FROM STDIN"
        ) as copy:
            for r in records:
                copy.write_row(
                    (r.event_id, r.event_type, r.verb, r.cloud, r.resource_type, r.resource_id,
                     r.project_id, r.occurred_at, r.source, r.payload_json, r.content_hash)
                )
        rows = cur.execute(
            """
            INSERT INTO events (event_id, event_type, verb, cloud, resource_type, resource_id,
                                project_id, occurred_at, source, payload, content_hash, received_at)
            SELECT event_id, event_type, verb, cloud, resource_type, resource_id,
                   project_id, occurred_at, source, payload::jsonb, content_hash, %s
            FROM _ingest_stage
            ORDER BY event_id
            ON CONFLICT (event_id) DO NOTHING
            RETURNING event_id
            """,
            (received_at,),
        ).fetchall()
        cur.execute("TRUNCATE _ingest_stage")
        return {row[0] for row in rows}

    def content_hashes(self, event_ids: Sequence[str]) -> dict[str, str]:
        if not event_ids:
            return {}
        rows = self.cur.execute(
            "SELECT event_id, content_hash FROM events WHERE event_id = ANY(%s)", (list(event_ids),)
        ).fetchall()
        return dict(rows)

    def insert_rejections(self, rows: Sequence[RejectedRow], received_at: datetime) -> None:
        if not rows:
            return
        with self.cur.copy(
            "COPY rejected_events (received_at, reason, message, origin, cloud, event_id, raw) FROM STDIN"
        ) as copy:
            for r in rows:
                copy.write_row((received_at, r.reason, r.message, r.origin, r.cloud, r.event_id, r.raw))


class PostgresStore(Store):
    dialect = "postgres"

    def __init__(
        self,
        url: str,
        *,
        migrate: bool = False,
        min_size: int = 1,
        max_size: int = 8,
        timeout: float = 10.0,
        retry_budget_s: float = 30.0,
        reconnect_timeout: float = 3.0,
    ):
        self.url = url
        self.retry_budget_s = retry_budget_s
        self.pool = ConnectionPool(
            url,
            min_size=min_size,
            max_size=max_size,
            timeout=timeout,
            open=False,
            # A connection that died with the server is found and replaced before it is handed out.
            check=ConnectionPool.check_connection,
            # psycopg_pool retries a failed connection with doubling delays for reconnect_timeout
            # (default 5 min), so after a long outage it would find the server back only minutes late;
            # giving up early lets the next request start a fresh attempt at once.
            reconnect_timeout=reconnect_timeout,
            kwargs={"connect_timeout": max(1, int(timeout))},
            name="tally",
        )
        self.pool.open(wait=False)
        if migrate:
            self.migrate()

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        try:
            with self.pool.connection() as conn:
                yield conn
        except Exception as exc:  # noqa: BLE001 - re-raised as the store's own error
            translated = _translate(exc)
            if translated is exc:
                raise
            raise translated from exc

    @contextmanager
    def unit_of_work(self) -> Iterator[PostgresUnitOfWork]:
        with self.connection() as conn:
            with conn.transaction():
                yield PostgresUnitOfWork(conn)

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self.connection() as conn:
            return conn.execute(sql, list(params) or None).fetchall()

    def applied_migrations(self) -> list[str]:
        with self.connection() as conn:
            conn.execute(MIGRATIONS_TABLE)
            return [row[0] for row in conn.execute("SELECT name FROM schema_migrations ORDER BY version")]

    def migrate(self) -> list[str]:
        applied: list[str] = []
        with self.connection() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            conn.execute(MIGRATIONS_TABLE)
            done = {row[0] for row in conn.execute("SELECT version FROM schema_migrations")}
            for migration in migrations_for(self.dialect):
                if migration.version in done:
                    continue
                conn.execute(migration.sql)
                conn.execute(
                    "INSERT INTO schema_migrations (version, name) VALUES (%s, %s)",
                    (migration.version, migration.name),
                )
                applied.append(migration.name)
        return applied

    def close(self) -> None:
        self.pool.close()
