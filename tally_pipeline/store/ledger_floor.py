"""The write floor of one posting cycle, for ``tally bench post``: what merely writing its rows costs.

A steady cycle must append one posting per entity with usage and rewrite one checkpoint per entity,
whatever else it does. The floor does only that, with nothing read or computed: the cycle's own
posting rows bulk-loaded into a copy of ``ledger_postings`` (its key and checks: Postgres COPY from
the client; DuckDB, which has no COPY from a client, an insert from an Arrow table) holding the rows
the table held before the cycle (the cycle's postings land among its earlier ones, in the key's
order, and so do the floor's), and one
set-based update of every row of a copy of ``usage_checkpoints`` (the same columns the cycle sets).
The copies are made and filled untimed, and dropped after, so the benchmark's tables are untouched.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from tally_pipeline.store.base import Store, UnitOfWork
from tally_pipeline.store.duckdb.store import DuckDBUnitOfWork
from tally_pipeline.store.postgres.store import PostgresUnitOfWork

_POSTINGS = "_floor_postings"
_CHECKPOINTS = "_floor_checkpoints"
_COPIES = ((_POSTINGS, "ledger_postings"), (_CHECKPOINTS, "usage_checkpoints"))  # (copy, table it copies)
_POSTING_COLUMNS = "cloud, project_id, meter, clamp, account, amount, unit, window_start, cycle_id, posted_at"
# The columns an advancing cycle sets (ledger_checkpoints.advance), each given a new value.
_ADVANCE = (
    "total = total + 1, clamp = clamp + INTERVAL '1 hour', aged_boundary = aged_boundary + INTERVAL '1 hour', "
    "aged_before = aged_before + 1, watermark = coalesce(watermark, 0) + 1, cycle_id = 'floor', updated_at = %s"
)


@dataclass(frozen=True, slots=True)
class WriteFloor:
    postings: int
    checkpoints: int
    postings_s: float  # the bulk load of the postings
    checkpoints_s: float  # the one update of the checkpoints
    held: int  # the earlier postings the copy held before the load

    @property
    def seconds(self) -> float:
        return self.postings_s + self.checkpoints_s


def measure_write_floor(store: Store, cycle_id: str, *, tries: int = 3) -> WriteFloor:
    """Time writing the rows cycle ``cycle_id`` wrote: its postings, and as many checkpoints as the table
    holds; the fastest of ``tries``, each into fresh copies (a floor is the least the writes can take:
    one try on a noisy machine measured 1.47 s and 2.45 s for the same rows)."""
    rows = store.query(f"SELECT {_POSTING_COLUMNS} FROM ledger_postings WHERE cycle_id = %s", (cycle_id,))
    return min((_write_once(store, cycle_id, rows) for _ in range(tries)), key=lambda floor: floor.seconds)


def _write_once(store: Store, cycle_id: str, rows: list[tuple[Any, ...]]) -> WriteFloor:
    try:
        held = store.run(lambda uow: _make_copies(uow, cycle_id))
        store.checkpoint()  # the copies' own writes are not the floor's: it starts clean, as each cycle does
        postings_s = store.run(lambda uow: _timed(lambda: _load_postings(uow, rows)))
        checkpoints, checkpoints_s = store.run(_timed_update)
    finally:
        store.run(_drop_copies)
    return WriteFloor(len(rows), checkpoints, postings_s, checkpoints_s, held)


def _timed(work: Callable[[], object]) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def _timed_update(uow: UnitOfWork) -> tuple[int, float]:
    elapsed = _timed(lambda: uow.execute(f"UPDATE {_CHECKPOINTS} SET {_ADVANCE}", (datetime.now(UTC),)))
    [(count,)] = uow.fetchall(f"SELECT count(*) FROM {_CHECKPOINTS} WHERE cycle_id = 'floor'")
    return int(count), elapsed


def _make_copies(uow: UnitOfWork, cycle_id: str) -> int:
    """The copies, filled; how many earlier postings the postings copy holds."""
    if isinstance(uow, PostgresUnitOfWork):
        # LIKE … INCLUDING ALL copies the key, the checks and the defaults; the storage parameters
        # (usage_checkpoints' fillfactor, which makes its rewrites HOT updates) are copied by hand.
        for copy, table in _COPIES:
            [(options,)] = uow.fetchall("SELECT reloptions FROM pg_class WHERE oid = %s::regclass", (table,))
            storage = f" WITH ({', '.join(options)})" if options else ""
            uow.execute(f"CREATE TABLE {copy} (LIKE {table} INCLUDING ALL){storage}")
    else:
        # DuckDB has no LIKE: its catalogue keeps each table's CREATE statement.
        for copy, table in _COPIES:
            [(ddl,)] = uow.fetchall("SELECT sql FROM duckdb_tables() WHERE table_name = %s", (table,))
            uow.execute(ddl.replace(f"CREATE TABLE {table}", f"CREATE TABLE {copy}", 1))
    uow.execute(f"INSERT INTO {_CHECKPOINTS} SELECT * FROM usage_checkpoints")
    uow.execute(f"INSERT INTO {_POSTINGS} SELECT * FROM ledger_postings WHERE cycle_id <> %s", (cycle_id,))
    if isinstance(uow, PostgresUnitOfWork):
        uow.execute(f"ANALYZE {_CHECKPOINTS}")
    [(held,)] = uow.fetchall(f"SELECT count(*) FROM {_POSTINGS}")
    return int(held)


def _load_postings(uow: UnitOfWork, rows: list[tuple[Any, ...]]) -> None:
    if isinstance(uow, PostgresUnitOfWork):
        with uow.cur.copy(f"COPY {_POSTINGS} ({_POSTING_COLUMNS}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        return
    assert isinstance(uow, DuckDBUnitOfWork)
    import pyarrow as pa

    names = [c.strip() for c in _POSTING_COLUMNS.split(",")]
    if not rows:
        return
    table = pa.table({name: list(column) for name, column in zip(names, zip(*rows), strict=True)})
    uow.con.register("_floor_rows", table)
    try:
        uow.con.execute(f"INSERT INTO {_POSTINGS} ({_POSTING_COLUMNS}) SELECT {_POSTING_COLUMNS} FROM _floor_rows")
    finally:
        uow.con.unregister("_floor_rows")


def _drop_copies(uow: UnitOfWork) -> None:
    for copy, _ in _COPIES:
        uow.execute(f"DROP TABLE IF EXISTS {copy}")
