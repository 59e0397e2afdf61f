"""Stores: ``open_store(url)`` picks the backend from the URL."""

from __future__ import annotations

from tally_pipeline.store.base import (
    RejectedEntry,
    RejectedRow,
    Store,
    StoreBusy,
    StoreError,
    StoreUnavailable,
    UnitOfWork,
)
from tally_pipeline.store.errors import TransactionFailed, TransientConflict, UnsupportedDatabase

__all__ = [
    "RejectedEntry",
    "RejectedRow",
    "Store",
    "StoreBusy",
    "StoreError",
    "StoreUnavailable",
    "TransactionFailed",
    "TransientConflict",
    "UnitOfWork",
    "UnsupportedDatabase",
    "open_store",
]


def open_store(url: str, *, migrate: bool | None = None, duckdb_threads: int | None = None) -> Store:
    """Open the store a database URL names.

    ``duckdb://PATH`` (``duckdb://:memory:`` for a throw-away one) migrates itself by default: it
    is the embedded default and nobody runs a migration step for it. ``postgresql://…`` does not:
    production schema changes go through ``tally db migrate``. ``duckdb_threads``: DuckDB's worker
    threads (default: one per core; Postgres ignores it).
    """
    if url.startswith("duckdb://"):
        from tally_pipeline.store.duckdb.store import DuckDBStore

        return DuckDBStore(url.removeprefix("duckdb://"), migrate=True if migrate is None else migrate,
                           threads=duckdb_threads)
    if url.startswith(("postgresql://", "postgres://")):
        from tally_pipeline.store.postgres.store import PostgresStore

        return PostgresStore(url, migrate=bool(migrate))
    raise UnsupportedDatabase(url)
