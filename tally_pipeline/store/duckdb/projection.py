"""The projection's reads and writes on DuckDB (see ``projection_tables``).

Pending events are found by ``seq``: the log is appended in ``seq`` order, so the row groups'
min/max statistics skip everything already folded. The touched resources' stored rows and, for
the few re-folded from scratch, their histories are found by a semi join on the key, which in a
column store reads the key columns of the table (DuckDB's ART index does not serve a join).

Writers are serialised (one process holds the file, one thread the write lock), so every event up
to ``max(seq)`` is committed.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa

from tally_pipeline.store.duckdb.fold import FOLD_TABLE, INTERVALS_SELECT, STATE_SELECT
from tally_pipeline.store.projection_tables import INTERVAL_COLUMNS, KEY, STATE_COLUMNS, Key, StoredFold

# The SQL fold sorts every history: above this it spills to disk instead of growing (a rebuild of
# 8M events would otherwise take 3.5 GB). Set for the fold only, then put back.
FOLD_MEMORY_LIMIT = "1GB"

_UTC = pa.timestamp("us", tz="UTC")
_FOLD_COLUMNS = "cloud, resource_type, resource_id, event_id, verb, occurred_at, project_id, " \
                "json_extract(payload, '$.size')::VARCHAR AS size, seq"
_TYPES = {"created_at": _UTC, "deleted_at": _UTC, "last_event_at": _UTC, "start_at": _UTC, "end_at": _UTC,
          "last_seq": pa.int64(), "event_count": pa.int32(), "interval_no": pa.int32(), "lifecycle_no": pa.int32()}


class DuckDBProjectionTables:
    def __init__(self, uow: Any):
        self.con = uow.con

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
        yield from self.con.execute(
            f"SELECT {_FOLD_COLUMNS} FROM events WHERE seq > ? AND seq <= ? ORDER BY {KEY}", [watermark, high]
        ).fetchall()

    def stored(self, keys: Sequence[Key]) -> list[StoredFold]:
        if not keys:
            return []
        self._register_keys("_keys", keys)
        try:
            rows = self.con.execute(f"""
                SELECT c.cloud, c.resource_type, c.resource_id, status, project_id, size::VARCHAR, created_at,
                       deleted_at, last_event_at, last_seq, event_count, i.last_no, i.last_lifecycle, i.open_start
                FROM current_resources c SEMI JOIN _keys USING ({KEY})
                LEFT JOIN (
                    SELECT {KEY}, max(interval_no) AS last_no, max(lifecycle_no) AS last_lifecycle,
                           max(start_at) FILTER (WHERE end_at IS NULL) AS open_start
                    FROM resource_intervals SEMI JOIN _keys USING ({KEY})
                    GROUP BY {KEY}
                ) i USING ({KEY})
            """).fetchall()
        finally:
            self.con.unregister("_keys")
        return [StoredFold((r[0], r[1], r[2]), *r[3:]) for r in rows]

    def histories(self, keys: Sequence[Key]) -> Iterator[tuple]:
        if not keys:
            return
        self._register_keys("_refold", keys)
        try:
            rows = self.con.execute(
                f"SELECT {_FOLD_COLUMNS} FROM events SEMI JOIN _refold USING ({KEY}) ORDER BY {KEY}"
            ).fetchall()
        finally:
            self.con.unregister("_refold")
        yield from rows

    def replace(self, cuts: Sequence[tuple[Key, int]], states: Iterable[tuple], intervals: Iterable[tuple]) -> None:
        if cuts:
            table = pa.table({
                "cloud": [k[0] for k, _ in cuts], "resource_type": [k[1] for k, _ in cuts],
                "resource_id": [k[2] for k, _ in cuts], "from_no": pa.array([n for _, n in cuts], pa.int32()),
            })
            self.con.register("_cuts", table)
            try:
                self.con.execute(
                    "DELETE FROM resource_intervals r USING _cuts c WHERE r.cloud = c.cloud AND "
                    "r.resource_type = c.resource_type AND r.resource_id = c.resource_id AND r.interval_no >= c.from_no"
                )
                self.con.execute(f"DELETE FROM current_resources WHERE ({KEY}) IN (SELECT ({KEY}) FROM _cuts)")
            finally:
                self.con.unregister("_cuts")
        self._insert("current_resources", STATE_COLUMNS, list(states))
        self._insert("resource_intervals", INTERVAL_COLUMNS, list(intervals))

    def fold_in_sql(self, watermark: int, high: int, *, full: bool) -> int:
        con = self.con
        previous = con.execute("SELECT current_setting('memory_limit'), current_setting('temp_directory')").fetchall()[0]
        con.execute(f"SET memory_limit = '{FOLD_MEMORY_LIMIT}'")
        if not previous[1]:  # an in-memory database has nowhere to spill by default
            con.execute(f"SET temp_directory = '{tempfile.gettempdir()}/tally-duckdb-spill'")
        try:
            if full:
                con.execute("DELETE FROM resource_intervals")
                con.execute("DELETE FROM current_resources")
                source = "events"
            else:
                con.execute(f"CREATE OR REPLACE TEMP TABLE _touched AS "
                            f"SELECT DISTINCT {KEY} FROM events WHERE seq > ? AND seq <= ?", [watermark, high])
                con.execute(f"DELETE FROM resource_intervals WHERE ({KEY}) IN (SELECT ({KEY}) FROM _touched)")
                con.execute(f"DELETE FROM current_resources WHERE ({KEY}) IN (SELECT ({KEY}) FROM _touched)")
                source = f"events SEMI JOIN _touched USING ({KEY})"
            con.execute(FOLD_TABLE.format(source=source))
            con.execute(f"INSERT INTO resource_intervals {INTERVALS_SELECT}")
            con.execute(f"INSERT INTO current_resources ({', '.join(STATE_COLUMNS)}) {STATE_SELECT}")
            con.execute("DROP TABLE _fold")
            count = con.execute(
                "SELECT count(*) FROM current_resources" if full else "SELECT count(*) FROM _touched"
            ).fetchall()[0][0]
            if not full:
                con.execute("DROP TABLE _touched")
        finally:
            con.execute(f"SET memory_limit = '{previous[0]}'")
        return int(count)

    def set_watermark(self, high: int) -> None:
        self.con.execute("UPDATE projection_state SET watermark = ? WHERE name = 'resources'", [high])

    def _register_keys(self, name: str, keys: Sequence[Key]) -> None:
        self.con.register(name, pa.table({"cloud": [k[0] for k in keys], "resource_type": [k[1] for k in keys],
                                          "resource_id": [k[2] for k in keys]}))

    def _insert(self, table: str, names: Sequence[str], rows: list[tuple]) -> None:
        if not rows:
            return
        columns = list(zip(*rows))
        arrow = pa.table({n: pa.array(list(c), _TYPES.get(n, pa.string())) for n, c in zip(names, columns)})
        self.con.register("_folded", arrow)
        try:
            self.con.execute(f"INSERT INTO {table} ({', '.join(names)}) SELECT {', '.join(names)} FROM _folded")
        finally:
            self.con.unregister("_folded")
