"""The projection's reads and writes on DuckDB (see ``projection_tables``).

Pending events are found by ``seq``: the log is appended in ``seq`` order, so the row groups'
min/max statistics skip everything already folded. They join ``folded_events`` as they are folded
(migration 0012): the fold's columns of the log, in ``seq`` order, with each resource's
``resource_key``.

The touched resources' stored rows, and the histories of the few re-folded from scratch, are found
by ``resource_key``, a BIGINT indexed (ART) in ``current_resources``, ``resource_intervals`` and
``folded_events``. DuckDB probes an ART index only when a scan's one filter is a list of constants
on the indexed column (a join, or any other filter pushed into the same scan, reads the whole
table instead), so each of those reads and deletes is ``WHERE resource_key IN (<integers>)`` and
nothing else. Resources may share a key: the full key is compared here, after the read, and a
delete removes every row of the keys it names, then writes back the rows that stay (the intervals
before the cut, and any other resource that shares a key).

Writers are serialised (one process holds the file, one thread the write lock), so every event up
to ``max(seq)`` is committed.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa

from tally_pipeline.store.fold_duckdb import FOLD_TABLE, INTERVALS_SELECT, STATE_SELECT
from tally_pipeline.store.projection_tables import INTERVAL_COLUMNS, KEY, STATE_COLUMNS, Key, StoredFold

# The SQL fold sorts every history: above this it spills to disk instead of growing (a rebuild of
# 8M events would otherwise take 3.5 GB). Set for the fold only, then put back.
FOLD_MEMORY_LIMIT = "1GB"
# DuckDB gives up an index scan (and scans the table) once more rows than this match; the default
# (2,048) is below the rows of a thousand touched resources. Set for the refresh, then put back.
INDEX_SCAN_MAX_COUNT = 200_000
# Migration 0012's macro: a resource's key, computed the same way wherever rows are written.
RESOURCE_KEY = "tally_resource_key(cloud, resource_type, resource_id)"

_UTC = pa.timestamp("us", tz="UTC")
_FOLD_COLUMNS = "cloud, resource_type, resource_id, event_id, verb, occurred_at, project_id, size::VARCHAR, seq"
# ``folded_events`` as copied from the log, in its column order.
_COPY_SELECT = (f"SELECT {RESOURCE_KEY}, cloud, resource_type, resource_id, event_id, verb, occurred_at, project_id, "
                "json_extract(payload, '$.size'), seq FROM events")
_STATE_READ = ", ".join(c if c != "size" else "size::VARCHAR" for c in STATE_COLUMNS)
_INTERVAL_READ = ", ".join(c if c != "size" else "size::VARCHAR" for c in INTERVAL_COLUMNS)
_TYPES = {"created_at": _UTC, "deleted_at": _UTC, "last_event_at": _UTC, "start_at": _UTC, "end_at": _UTC,
          "last_seq": pa.int64(), "event_count": pa.int32(), "interval_no": pa.int32(), "lifecycle_no": pa.int32()}


class DuckDBProjectionTables:
    def __init__(self, uow: Any):
        self.con = uow.con
        self._keys: dict[Key, int] = {}  # the resource key of each pending resource
        # Every stored row of the pending resources' keys, as ``stored`` read them: ``replace``
        # deletes by key and writes back those that stay.
        self._states: list[tuple] = []
        self._intervals: list[tuple] = []

    def bounds(self) -> tuple[int, int]:
        watermark, high = self.con.execute(
            "SELECT (SELECT watermark FROM projection_state WHERE name = 'resources'), "
            "(SELECT coalesce(max(seq), 0) FROM events)"
        ).fetchall()[0]
        return int(watermark), int(high)

    def pending_count(self, watermark: int, high: int) -> int:
        return int(self.con.execute("SELECT count(*) FROM events WHERE seq > ? AND seq <= ?",
                                    [watermark, high]).fetchall()[0][0])

    def pending_rows(self, watermark: int, high: int) -> Iterator[tuple]:
        """The pending events, copied to ``folded_events`` first: the histories read later include them."""
        self._copy_pending(watermark, high)
        rows = self.con.execute(
            f"SELECT resource_key, {_FOLD_COLUMNS} FROM folded_events WHERE seq > ? AND seq <= ? ORDER BY {KEY}",
            [watermark, high],
        ).fetchall()
        keys = self._keys
        for row in rows:
            keys[row[1:4]] = row[0]
            yield row[1:]

    def stored(self, keys: Sequence[Key]) -> list[StoredFold]:
        if not keys:
            return []
        wanted = set(keys)
        in_keys = self._in_list(keys)
        self._set_index_scan_max_count()
        self._states = self.con.execute(
            f"SELECT {_STATE_READ}, resource_key FROM current_resources WHERE resource_key IN ({in_keys})").fetchall()
        self._intervals = self.con.execute(
            f"SELECT {_INTERVAL_READ}, resource_key FROM resource_intervals WHERE resource_key IN ({in_keys})"
        ).fetchall()
        # Per key: the last interval's number and lifecycle, and the open interval's start.
        last: dict[Key, tuple[int, int, Any]] = {}
        for row in self._intervals:
            key = row[:3]
            if key not in wanted:
                continue
            number, lifecycle, start, end = row[3], row[4], row[7], row[8]
            before = last.get(key)
            open_start = start if end is None else None
            if before is not None:
                open_start = max((t for t in (before[2], open_start) if t is not None), default=None)
                number, lifecycle = max(number, before[0]), max(lifecycle, before[1])
            last[key] = (number, lifecycle, open_start)
        return [StoredFold(row[:3], *row[3:-1], *last.get(row[:3], (None, None, None)))
                for row in self._states if row[:3] in wanted]

    def histories(self, keys: Sequence[Key]) -> Iterator[tuple]:
        if not keys:
            return
        wanted = set(keys)
        self._set_index_scan_max_count()
        rows = self.con.execute(
            f"SELECT {_FOLD_COLUMNS} FROM folded_events WHERE resource_key IN ({self._in_list(keys)}) ORDER BY {KEY}"
        ).fetchall()
        yield from (row for row in rows if row[:3] in wanted)

    def replace(self, cuts: Sequence[tuple[Key, int]], states: Iterable[tuple], intervals: Iterable[tuple]) -> None:
        states, intervals = list(states), list(intervals)
        if cuts:
            cut = dict(cuts)
            cut_keys = {self._keys[key] for key in cut}
            # Deleted below with their resource keys but not replaced: the intervals before the
            # cut, and the rows of any other resource that shares a key. Written back as they were.
            states.extend(row[:-1] for row in self._states if row[-1] in cut_keys and row[:3] not in cut)
            intervals.extend(row[:-1] for row in self._intervals
                             if row[-1] in cut_keys and (row[:3] not in cut or row[3] < cut[row[:3]]))
            in_keys = self._in_list(list(cut))
            self._set_index_scan_max_count()
            self.con.execute(f"DELETE FROM current_resources WHERE resource_key IN ({in_keys})")
            self.con.execute(f"DELETE FROM resource_intervals WHERE resource_key IN ({in_keys})")
        self._insert("current_resources", STATE_COLUMNS, states)
        self._insert("resource_intervals", INTERVAL_COLUMNS, intervals)

    def fold_in_sql(self, watermark: int, high: int, *, full: bool) -> int:
        con = self.con
        previous = con.execute("SELECT current_setting('memory_limit'), current_setting('temp_directory')").fetchall()[0]
        con.execute(f"SET memory_limit = '{FOLD_MEMORY_LIMIT}'")
        if not previous[1]:  # an in-memory database has nowhere to spill by default
            con.execute(f"SET temp_directory = '{tempfile.gettempdir()}/tally-duckdb-spill'")
        try:
            if full:
                # Every row is rewritten: indexes are built once at the end, not kept row by row.
                indexes = self._drop_indexes(("folded_events", "resource_intervals", "current_resources"))
                con.execute("DELETE FROM folded_events")
                con.execute(f"INSERT INTO folded_events {_COPY_SELECT}")
                con.execute("DELETE FROM resource_intervals")
                con.execute("DELETE FROM current_resources")
                source = "folded_events"
            else:
                self._copy_pending(watermark, high)
                con.execute(f"CREATE OR REPLACE TEMP TABLE _touched AS "
                            f"SELECT DISTINCT {KEY} FROM folded_events WHERE seq > ? AND seq <= ?", [watermark, high])
                con.execute(f"DELETE FROM resource_intervals WHERE ({KEY}) IN (SELECT ({KEY}) FROM _touched)")
                con.execute(f"DELETE FROM current_resources WHERE ({KEY}) IN (SELECT ({KEY}) FROM _touched)")
                source = f"folded_events SEMI JOIN _touched USING ({KEY})"
            con.execute(FOLD_TABLE.format(source=source))
            con.execute(f"INSERT INTO resource_intervals ({', '.join(INTERVAL_COLUMNS)}, resource_key) {INTERVALS_SELECT}")
            con.execute(f"INSERT INTO current_resources ({', '.join(STATE_COLUMNS)}, resource_key) {STATE_SELECT}")
            con.execute("DROP TABLE _fold")
            count = con.execute(
                "SELECT count(*) FROM current_resources" if full else "SELECT count(*) FROM _touched"
            ).fetchall()[0][0]
            if full:
                for create in indexes:
                    con.execute(create)
            else:
                con.execute("DROP TABLE _touched")
        finally:
            con.execute(f"SET memory_limit = '{previous[0]}'")
        return int(count)

    def set_watermark(self, high: int) -> None:
        self.con.execute("UPDATE projection_state SET watermark = ? WHERE name = 'resources'", [high])

    def _copy_pending(self, watermark: int, high: int) -> None:
        # Rows above the watermark can only be left by a migration that moved it back (as 0007
        # did, to re-fold rewritten events): they are copied again from the log as it is now.
        self.con.execute("DELETE FROM folded_events WHERE seq > ?", [watermark])
        self.con.execute(f"INSERT INTO folded_events {_COPY_SELECT} WHERE seq > ? AND seq <= ? ORDER BY seq",
                         [watermark, high])

    def _in_list(self, keys: Iterable[Key]) -> str:
        """The resource keys of ``keys`` as SQL constants (integers this class computed, never text)."""
        return ", ".join(str(int(k)) for k in {self._keys[key] for key in keys})

    def _set_index_scan_max_count(self) -> None:
        # SESSION: this unit of work's connection only, gone with it.
        self.con.execute(f"SET SESSION index_scan_max_count = {INDEX_SCAN_MAX_COUNT}")

    def _drop_indexes(self, tables: Sequence[str]) -> list[str]:
        """Drop the indexes of ``tables``; return the statements that create them again."""
        names = ", ".join(f"'{t}'" for t in tables)
        found = self.con.execute(f"SELECT index_name, sql FROM duckdb_indexes() WHERE table_name IN ({names}) "
                                 "AND database_name = current_database()").fetchall()
        for name, _ in found:
            self.con.execute(f'DROP INDEX "{name}"')
        return [sql for _, sql in found]

    def _insert(self, table: str, names: Sequence[str], rows: list[tuple]) -> None:
        if not rows:
            return
        columns = list(zip(*rows))
        arrow = pa.table({n: pa.array(list(c), _TYPES.get(n, pa.string())) for n, c in zip(names, columns)})
        self.con.register("_folded", arrow)
        try:
            self.con.execute(f"INSERT INTO {table} ({', '.join(names)}, resource_key) "
                             f"SELECT {', '.join(names)}, {RESOURCE_KEY} FROM _folded")
        finally:
            self.con.unregister("_folded")
