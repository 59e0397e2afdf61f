"""The projection's reads and writes on DuckDB (see ``projection_tables``).

Pending events are found by ``seq``: the log is appended in ``seq`` order, so the row groups'
min/max statistics skip everything already folded. They join ``folded_events`` as they are folded
(migration 0012): the fold's columns of the log, in ``seq`` order, each row with its resource's
``resource_key`` (a BIGINT hash of the key).

The touched resources' stored rows, and the histories of the few re-folded from scratch, are found
by a semi join on ``resource_key`` alone, against the keys registered from Arrow. DuckDB scans the
key column of the table (a column store has no cheaper way for a thousand scattered keys: its ART
index costs more per row found than this scan per row read), pushes a Bloom filter of the keys
into the scan, and hashes one integer per row instead of three strings. Resources may share a
``resource_key``, so the full key is compared afterwards, here. Stored rows are deleted by
``rowid``, read with them in the same transaction: exactly the rows meant.

Writers are serialised (one process holds the file, one thread the write lock), so every event up
to ``max(seq)`` is committed.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pyarrow as pa

from tally_pipeline.store.duckdb.fold import FOLD_TABLE, INTERVALS_SELECT, STATE_SELECT
from tally_pipeline.store.projection_tables import (
    INTERVAL_COLUMNS,
    KEY,
    STATE_COLUMNS,
    Key,
    StoredFold,
)

# The SQL fold sorts every history: above this it spills to disk instead of growing (a rebuild of
# 8M events would otherwise take 3.5 GB). Set for the fold only, then reset to the default.
FOLD_MEMORY_LIMIT = "1GB"
# Migration 0012's macro: a resource's key, computed the same way wherever rows are written.
RESOURCE_KEY = "tally_resource_key(cloud, resource_type, resource_id)"

_UTC = pa.timestamp("us", tz="UTC")
_HISTORY_COLUMNS = "event_id, verb, occurred_at, project_id, size::VARCHAR, seq, status"
_FOLD_COLUMNS = f"{KEY}, {_HISTORY_COLUMNS}"
# ``folded_events`` as copied from the log, in its column order.
_COPY_SELECT = (f"SELECT {RESOURCE_KEY}, cloud, resource_type, resource_id, event_id, verb, occurred_at, project_id, "
                "json_extract(payload, '$.size'), seq, nullif(json_extract_string(payload, '$.status'), '') FROM events")
_STATE_READ = ", ".join(c if c != "size" else "size::VARCHAR" for c in STATE_COLUMNS)
_TYPES = {"created_at": _UTC, "deleted_at": _UTC, "last_event_at": _UTC, "start_at": _UTC, "end_at": _UTC,
          "last_seq": pa.int64(), "event_count": pa.int32(), "interval_no": pa.int32(), "lifecycle_no": pa.int32()}


class DuckDBProjectionTables:
    # Measured (1,000 late events at 1M, 2M and 8M events): the SQL fold of every touched resource
    # took 67, 84 and 115–124 ms, the Python path 96–117, 105–126 and 139–209 ms; the two are even
    # at 200–300 pending events, and the Python path wins below (15 against 28 ms for one event).
    python_fold_max = 250

    def __init__(self, uow: Any):
        self.con = uow.con
        self._keys: dict[Key, int] = {}  # the resource key of each pending resource
        # Where ``stored`` found each resource's rows, for ``replace`` to delete them.
        self._state_rowids: dict[Key, int] = {}
        self._interval_rowids: dict[Key, list[int]] = {}  # by interval number
        # Set by ``stored`` when no resource key it met is shared: whose each key is.
        self._owners: dict[int, Key] = {}

    def bounds(self) -> tuple[int, int]:
        watermark, high = self.con.execute(
            "SELECT (SELECT watermark FROM projection_state WHERE name = 'resources'), "
            "(SELECT coalesce(max(seq), 0) FROM events)"
        ).fetchall()[0]
        return int(watermark), int(high)

    def pending_count(self, watermark: int, high: int) -> int:
        return int(self.con.execute("SELECT count(*) FROM events WHERE seq > ? AND seq <= ?",
                                    [watermark, high]).fetchall()[0][0])

    def pending_rows(self, watermark: int, high: int) -> Iterator[tuple[Any, ...]]:
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

    def learn_keys(self, keys: Sequence[Key]) -> None:
        """Compute the resource keys of resources not met among the pending events (for a reader of
        histories outside a refresh: the poster's late usage)."""
        missing = [key for key in keys if key not in self._keys]
        if not missing:
            return
        self.con.register("_learn", pa.table({name: [key[i] for key in missing]
                                              for i, name in enumerate(("cloud", "resource_type", "resource_id"))}))
        try:
            rows = self.con.execute(f"SELECT cloud, resource_type, resource_id, {RESOURCE_KEY} FROM _learn").fetchall()
        finally:
            self.con.unregister("_learn")
        for cloud, rtype, rid, resource_key in rows:
            self._keys[(cloud, rtype, rid)] = resource_key

    def stored(self, keys: Sequence[Key]) -> list[StoredFold]:
        if not keys:
            return []
        wanted = set(keys)
        with self._registered_keys("_keys", keys):
            states = self.con.execute(
                f"SELECT {_STATE_READ}, rowid FROM current_resources SEMI JOIN _keys USING (resource_key)").fetchall()
            # Every resource that has rows in these tables has a state row: if none of them shares a
            # resource key with another, the key alone tells whose a row is, and the text key
            # columns need not be read (measured: a third less work for the reads below at 8M events).
            owners = {self._keys[key]: key for key in keys}
            if len(owners) == len(wanted) and all(row[:3] in wanted for row in states):
                self._owners = owners
            group = "resource_key" if self._owners else KEY
            intervals = self.con.execute(f"""
                SELECT {group}, max(interval_no), max(lifecycle_no), max(start_at) FILTER (WHERE end_at IS NULL),
                       list(rowid ORDER BY interval_no)
                FROM resource_intervals SEMI JOIN _keys USING (resource_key)
                GROUP BY {group}
            """).fetchall()
        if self._owners:
            intervals = [(*self._owners[row[0]], *row[1:]) for row in intervals]
        self._state_rowids = {row[:3]: row[-1] for row in states if row[:3] in wanted}
        # Numbered from 0 without gaps: an interval's number is its place in the list.
        self._interval_rowids = {row[:3]: row[-1] for row in intervals if row[:3] in wanted}
        last = {row[:3]: row[3:6] for row in intervals if row[:3] in wanted}
        return [StoredFold(row[:3], *row[3:-1], *last.get(row[:3], (None, None, None)))
                for row in states if row[:3] in wanted]

    def histories(self, keys: Sequence[Key]) -> Iterator[tuple[Any, ...]]:
        if not keys:
            return
        wanted = set(keys)
        owners = self._owners
        with self._registered_keys("_refold", keys):
            if owners:
                rows = self.con.execute(f"SELECT resource_key, {_HISTORY_COLUMNS} FROM folded_events "
                                        "SEMI JOIN _refold USING (resource_key) ORDER BY resource_key").fetchall()
            else:
                rows = self.con.execute(f"SELECT {_FOLD_COLUMNS} FROM folded_events "
                                        f"SEMI JOIN _refold USING (resource_key) ORDER BY {KEY}").fetchall()
        if owners:
            yield from ((*owners[row[0]], *row[1:]) for row in rows)
        else:
            yield from (row for row in rows if row[:3] in wanted)

    def replace(self, cuts: Sequence[tuple[Key, int]], states: Iterable[tuple[Any, ...]], intervals: Iterable[tuple[Any, ...]]) -> None:
        if cuts:
            gone_states = [self._state_rowids[key] for key, _ in cuts]
            gone_intervals = [rowid for key, first in cuts for rowid in self._interval_rowids.get(key, ())[first:]]
            for table, rowids in (("current_resources", gone_states), ("resource_intervals", gone_intervals)):
                if rowids:
                    self.con.register("_gone", pa.table({"id": pa.array(rowids, pa.int64())}))
                    try:
                        self.con.execute(f"DELETE FROM {table} WHERE rowid IN (SELECT id FROM _gone)")
                    finally:
                        self.con.unregister("_gone")
        self._insert("current_resources", STATE_COLUMNS, list(states))
        self._insert("resource_intervals", INTERVAL_COLUMNS, list(intervals))

    def fold_in_sql(self, watermark: int, high: int, *, full: bool) -> int:
        con = self.con
        spill_to = con.execute("SELECT current_setting('temp_directory')").fetchall()[0][0]
        con.execute(f"SET memory_limit = '{FOLD_MEMORY_LIMIT}'")
        if not spill_to:  # an in-memory database has nowhere to spill by default
            con.execute(f"SET temp_directory = '{tempfile.gettempdir()}/tally-duckdb-spill'")
        try:
            if full:
                # Folded from the copy, which the refreshes keep; copied whole again only when its
                # rows are not the log's (a table restored or edited by hand).
                self._copy_pending(watermark, high)
                copied, logged = con.execute("SELECT (SELECT count(*) FROM folded_events), "
                                             "(SELECT count(*) FROM events WHERE seq <= ?)", [high]).fetchall()[0]
                if copied != logged:
                    con.execute("DELETE FROM folded_events")
                    con.execute(f"INSERT INTO folded_events {_COPY_SELECT} WHERE seq <= ?", [high])
                con.execute("DELETE FROM resource_intervals")
                con.execute("DELETE FROM current_resources")
                source = "folded_events"
            else:
                self._copy_pending(watermark, high)
                con.execute(f"CREATE OR REPLACE TEMP TABLE _touched AS SELECT DISTINCT resource_key, {KEY} "
                            "FROM folded_events WHERE seq > ? AND seq <= ?", [watermark, high])
                # By resource key: another resource that shares one is deleted and re-folded too.
                touched = "SEMI JOIN (SELECT DISTINCT resource_key FROM _touched) USING (resource_key)"
                con.execute(f"DELETE FROM resource_intervals WHERE rowid IN (SELECT rowid FROM resource_intervals {touched})")
                con.execute(f"DELETE FROM current_resources WHERE rowid IN (SELECT rowid FROM current_resources {touched})")
                source = f"folded_events {touched}"
            con.execute(FOLD_TABLE.format(source=source))
            con.execute(f"INSERT INTO resource_intervals ({', '.join(INTERVAL_COLUMNS)}, resource_key) {INTERVALS_SELECT}")
            con.execute(f"INSERT INTO current_resources ({', '.join(STATE_COLUMNS)}, resource_key) {STATE_SELECT}")
            con.execute("DROP TABLE _fold")
            count = con.execute(
                "SELECT count(*) FROM current_resources" if full else "SELECT count(*) FROM _touched"
            ).fetchall()[0][0]
            if not full:
                con.execute("DROP TABLE _touched")
        finally:
            # Back to DuckDB's default, which nothing else here changes. Not the value read before:
            # it reads back rounded down (18.8 GiB set, 18.7 shown), so each fold would shrink it.
            con.execute("RESET memory_limit")
        return int(count)

    def set_watermark(self, high: int) -> None:
        self.con.execute("UPDATE projection_state SET watermark = ? WHERE name = 'resources'", [high])

    def _copy_pending(self, watermark: int, high: int) -> None:
        # Rows above the watermark can only be left by a migration that moved it back (as 0007
        # did, to re-fold rewritten events): they are copied again from the log as it is now.
        self.con.execute("DELETE FROM folded_events WHERE seq > ?", [watermark])
        self.con.execute(f"INSERT INTO folded_events {_COPY_SELECT} WHERE seq > ? AND seq <= ? ORDER BY seq",
                         [watermark, high])

    @contextmanager
    def _registered_keys(self, name: str, keys: Iterable[Key]) -> Iterator[None]:
        """``keys``' resource keys as the one-column table ``name`` (``resource_key``) while in the block."""
        resource_keys = pa.array(sorted({self._keys[key] for key in keys}), pa.int64())
        self.con.register(name, pa.table({"resource_key": resource_keys}))
        try:
            yield
        finally:
            self.con.unregister(name)

    def _insert(self, table: str, names: Sequence[str], rows: list[tuple[Any, ...]]) -> None:
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
