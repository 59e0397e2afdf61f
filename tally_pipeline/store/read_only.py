"""Analysts' SQL on the store, read-only: what ``tally sql`` runs.

An embedded DuckDB file is opened ``read_only`` for one statement at a time and closed at once, so a
shell left open between queries never holds the file the pipeline and the API need; while another
process holds it the open waits with backoff, as every tally process does. PostgreSQL runs each
statement in a read-only transaction. Either way nothing a statement does is kept.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from tally_pipeline.store.base import StoreBusy, StoreError, StoreUnavailable


class QueryFailed(StoreError):
    """The database refused the statement (a syntax error, an unknown table, a write)."""


@dataclass(frozen=True)
class QueryResult:
    columns: list[str]
    rows: list[tuple[Any, ...]]


def run_read_only(url: str, sql: str, *, wait_s: float = 30.0) -> QueryResult:
    """Run ``sql`` (one or more statements: the last one's rows are returned) on the database ``url`` names."""
    if url.startswith("duckdb://"):
        return _duckdb(url.removeprefix("duckdb://"), sql, wait_s)
    if url.startswith(("postgresql://", "postgres://")):
        return _postgres(url, sql)
    raise StoreError(f"unsupported database URL {url!r}: use duckdb://PATH or postgresql://…")


def _duckdb(path: str, sql: str, wait_s: float) -> QueryResult:
    import duckdb

    from tally_pipeline.store.duckdb.store import _is_lock_error

    if path in ("", ":memory:"):
        raise StoreError("an in-memory DuckDB database belongs to the process that made it: give a file")
    deadline = time.monotonic() + wait_s
    delay = 0.01
    while True:
        try:
            con = duckdb.connect(path, read_only=True)
            break
        except duckdb.IOException as exc:
            if not _is_lock_error(exc):
                raise StoreUnavailable(f"cannot open {path}: {exc}") from None
            if time.monotonic() + delay > deadline:
                raise StoreBusy(f"{path} stayed locked by another process for {wait_s:.0f} s (it is writing; try "
                                "again, or read the Parquet snapshot)") from None
            time.sleep(delay)  # another process holds the file: wait for its turn, as the store does
            delay = min(delay * 2, 0.25)
    try:
        con.execute("SET TimeZone = 'UTC'")
        try:
            cursor = con.execute(sql)
            columns = [d[0] for d in cursor.description or []]
            rows = cursor.fetchall() if cursor.description else []
        except duckdb.Error as exc:
            raise QueryFailed(str(exc).strip()) from None
        return QueryResult(columns, rows)
    finally:
        con.close()


def _postgres(url: str, sql: str) -> QueryResult:
    import psycopg

    from tally_pipeline.redaction import redact

    try:
        conn = psycopg.connect(url, autocommit=False)
    except psycopg.OperationalError as exc:
        raise StoreUnavailable(f"PostgreSQL unavailable: {redact(str(exc))}") from None
    try:
        conn.read_only = True
        try:
            with conn.cursor() as cursor:
                cursor.execute("SET TIME ZONE 'UTC'")
                cursor.execute(sql.encode())  # bytes: no client-side placeholders, the text runs as written
                columns = [d.name for d in cursor.description or []]
                rows = cursor.fetchall() if cursor.description else []
        except psycopg.Error as exc:
            raise QueryFailed(str(exc).strip()) from None
        finally:
            conn.rollback()
        return QueryResult(columns, rows)
    finally:
        conn.close()
