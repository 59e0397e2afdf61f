"""Parquet snapshots of the asset tables, for analysts of an embedded DuckDB database.

An embedded DuckDB file admits one process at a time, so an analyst who opens it while the pipeline
runs gets a lock error (and would block the pipeline while reading). A snapshot is a folder of
Parquet files, one per table, that DuckDB, polars or pandas read at any time. Each file is written
beside its final name and renamed into place, so a reader sees either the previous snapshot or the
new one, never half a file. ``_snapshot.json`` says when it was taken and how many rows each holds.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from tally_pipeline.store.base import Store, StoreError
from tally_pipeline.store.duckdb.store import DuckDBStore

#: The tables analysts read (docs/data-dictionary.md), in the order they are written: every asset table
#: of the Dagster catalog (a test holds the two equal).
SNAPSHOT_TABLES = (
    "events", "cloud_activity", "rejected_events", "current_resources", "resource_intervals", "projection_state",
    "sync_runs", "sync_deferrals", "usage_daily", "usage_checkpoints", "ledger_postings", "ledger_cycles",
    "ledger_skips", "usage_statements", "statement_months",
)
MANIFEST = "_snapshot.json"


@dataclass(frozen=True)
class Snapshot:
    directory: Path
    written_at: datetime
    rows: dict[str, int]


def takes_snapshots(store: Store) -> bool:
    """Whether ``store`` is an embedded DuckDB file (Postgres serves analysts directly; memory has no folder)."""
    return isinstance(store, DuckDBStore) and store.path not in ("", ":memory:")


def default_snapshot_dir(store: Store) -> Path:
    """``snapshot/`` beside the DuckDB file."""
    if not takes_snapshots(store):
        raise StoreError("Parquet snapshots are taken of an embedded DuckDB file; Postgres serves analysts directly")
    assert isinstance(store, DuckDBStore)  # takes_snapshots said so
    return Path(store.path).resolve().parent / "snapshot"


def write_snapshot(store: Store, directory: Path | None = None, tables: tuple[str, ...] = SNAPSHOT_TABLES) -> Snapshot:
    """Write each table to ``directory/<table>.parquet`` in one read transaction, then the manifest."""
    if not isinstance(store, DuckDBStore):
        raise StoreError("Parquet snapshots are taken of an embedded DuckDB file; Postgres serves analysts directly")
    directory = directory or default_snapshot_dir(store)
    directory.mkdir(parents=True, exist_ok=True)
    written_at = datetime.now(UTC)
    rows: dict[str, int] = {}
    with store.connection() as con:
        # One transaction: every file shows the database at the same instant.
        con.execute("BEGIN TRANSACTION")
        try:
            for table in tables:
                final = directory / f"{table}.parquet"
                partial = directory / f".{table}.parquet.partial"
                # The path is ours (a folder name and a table name from the list above), not data.
                copied = con.execute(
                    f"COPY (SELECT * FROM {table}) TO '{_quoted(partial)}' (FORMAT parquet, COMPRESSION zstd)").fetchall()
                rows[table] = int(copied[0][0])  # COPY answers how many rows it wrote
                os.replace(partial, final)
        finally:
            con.execute("ROLLBACK")
    manifest = {"written_at": written_at.isoformat().replace("+00:00", "Z"), "rows": rows}
    partial = directory / f".{MANIFEST}.partial"
    partial.write_text(json.dumps(manifest, indent=2) + "\n")
    os.replace(partial, directory / MANIFEST)
    return Snapshot(directory, written_at, rows)


def snapshot_written_at(directory: Path) -> datetime | None:
    """When the snapshot in ``directory`` was taken (its manifest), None when there is none."""
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
        return datetime.fromisoformat(str(manifest["written_at"]).replace("Z", "+00:00"))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _quoted(path: Path) -> str:
    return str(path).replace("'", "''")
