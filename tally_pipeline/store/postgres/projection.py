"""The projection's reads and writes on Postgres (see ``projection_tables``).

Pending events are read through ``events_by_seq``, the touched resources' stored rows through the
projection tables' primary keys, and the histories re-folded from scratch through
``events_by_resource`` (a hash of the key: ``resource_key``): each read is bounded by what
changed, not by the size of the log. The touched keys go to a temporary table (analysed, so the
planner sees a few rows and picks the indexes) that the reads and deletes join.

``seq`` is assigned at insert, not at commit: ``stable_high_water`` waits for in-flight ingest
transactions (ingest holds ``INGEST_LOCK`` shared) and reads the sequence, below which every event
is committed.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from tally_pipeline.store.postgres.fold import (
    DICTIONARIES,
    DICTIONARY_SIZES,
    DROP_DICTIONARIES,
    FOLD_TABLE,
    ID_MASK,
    INTERVALS_SELECT,
    STATE_SELECT,
    changed_counts,
    changed_rows,
    insert_all,
    write_changes,
)
from tally_pipeline.store.postgres.locks import INGEST_LOCK, PROJECTION_LOCK
from tally_pipeline.store.postgres.resource_key import same_resource
from tally_pipeline.store.projection_tables import INTERVAL_COLUMNS, KEY, STATE_COLUMNS, Key, StoredFold

# The SQL fold's sorts spill to disk past this, per worker. With more, the planner prefers one
# in-memory sort to a parallel one, which measured slower (6.0 s against 3.5 s at 250k events).
FOLD_WORK_MEM = "64MB"

# The index builds after the SQL fold filled an empty table sort in this much memory.
INDEX_BUILD_MEM = "256MB"
# A table's indexes: (name, the constraint it backs or NULL, the constraint's or index's definition).
_INDEXES = """
SELECT quote_ident(ic.relname), quote_ident(c.conname),
       CASE WHEN c.oid IS NULL THEN pg_get_indexdef(i.indexrelid) ELSE pg_get_constraintdef(c.oid) END
FROM pg_index i
JOIN pg_class ic ON ic.oid = i.indexrelid
LEFT JOIN pg_constraint c ON c.conindid = i.indexrelid AND c.conrelid = i.indrelid
WHERE i.indrelid = %s::regclass
ORDER BY c.oid IS NULL, ic.relname
"""

# ``size`` as text: decoded once per distinct value by the fold's reader, not per row by the driver.
_FOLD_COLUMNS = ("e.cloud, e.resource_type, e.resource_id, e.event_id, e.verb, e.occurred_at, e.project_id, "
                 "(e.payload -> 'size')::text, e.seq, nullif(e.payload ->> 'status', '')")
STATE_KEY = ("cloud", "resource_type", "resource_id")
INTERVAL_KEY = (*STATE_KEY, "interval_no")
# A bulk refresh joins the whole log to the touched keys: a hash join on the key columns (the
# resource hash would be estimated to match almost nothing, and the plan chosen for that).
_EVENT_OF_TOUCHED = "(e.cloud, e.resource_type, e.resource_id) = (k.cloud, k.resource_type, k.resource_id)"
# How many resources are stored: the statistics' count once the table has been analysed (exact
# enough to choose a plan by, and free), else counted.
_STORED_RESOURCES = ("SELECT CASE WHEN reltuples >= 0 THEN reltuples::bigint "
                     "ELSE (SELECT count(*) FROM current_resources) END "
                     "FROM pg_class WHERE oid = 'current_resources'::regclass")
_KEY_MATCH = "(t.cloud, t.resource_type, t.resource_id) = (k.cloud, k.resource_type, k.resource_id)"


def stable_high_water(uow: Any) -> int:
    """A seq below which every event is committed: taken while no ingest transaction is in flight."""
    uow.execute("SELECT pg_advisory_xact_lock(%s)", (INGEST_LOCK,))
    return last_seq(uow)


def last_seq(uow: Any) -> int:
    row = uow.fetchall("SELECT pg_sequence_last_value(pg_get_serial_sequence('events', 'seq')::regclass)")
    return int(row[0][0] or 0)


def history_sql(keys_table: str) -> str:
    """Every event of the resources in ``keys_table`` as fold rows, grouped by key.

    One probe of ``events_by_resource`` per key, whatever the statistics say: the lateral
    sub-select (kept apart by ``OFFSET 0``) can only be a nested loop over the keys. As a plain
    join, a log not yet analysed (a bulk load, autovacuum behind) was planned as a hash join over a
    scan of the whole log: 0.9 s at 2M events, where the probes take 8 ms.
    """
    return (f"SELECT e.* FROM {keys_table} k CROSS JOIN LATERAL ("
            f"SELECT {_FOLD_COLUMNS} FROM events e WHERE {same_resource('e', 'k')} OFFSET 0) e "
            "ORDER BY e.cloud, e.resource_type, e.resource_id")


class PostgresProjectionTables:
    # The SQL fold scans the log (its dictionaries, or a join to the touched keys), where the Python
    # path probes one index per resource: only a bulk load is cheaper in SQL.
    python_fold_max = 50_000

    def __init__(self, uow: Any, high: int):
        self.uow = uow
        self.cur = uow.cur
        self.high = high

    def bounds(self) -> tuple[int, int]:
        self.uow.execute("SELECT pg_advisory_xact_lock(%s)", (PROJECTION_LOCK,))
        watermark = int(self.uow.fetchall("SELECT watermark FROM projection_state WHERE name = 'resources'")[0][0])
        return watermark, self.high

    def pending_count(self, watermark: int, high: int) -> int:
        return int(self.uow.fetchall("SELECT count(*) FROM events WHERE seq > %s AND seq <= %s",
                                     (watermark, high))[0][0])

    def pending_rows(self, watermark: int, high: int) -> Iterator[tuple[Any, ...]]:
        yield from self.uow.fetchall(
            f"SELECT {_FOLD_COLUMNS} FROM events e WHERE e.seq > %s AND e.seq <= %s ORDER BY {KEY}",
            (watermark, high),
        )

    def stored(self, keys: Sequence[Key]) -> list[StoredFold]:
        if not keys:
            return []
        self._keys_table("_keys", keys)
        rows = self.uow.fetchall(f"""
            SELECT c.cloud, c.resource_type, c.resource_id, c.status, c.project_id, c.size::text, c.created_at,
                   c.deleted_at, c.last_event_at, c.last_seq, c.event_count, c.platform_status, i.last_no, i.last_lifecycle, i.open_start
            FROM _keys k
            JOIN current_resources c USING ({KEY})
            LEFT JOIN LATERAL (
                SELECT max(t.interval_no) AS last_no, max(t.lifecycle_no) AS last_lifecycle,
                       max(t.start_at) FILTER (WHERE t.end_at IS NULL) AS open_start
                FROM resource_intervals t WHERE {_KEY_MATCH}
            ) i ON true
        """)
        return [StoredFold((r[0], r[1], r[2]), *r[3:]) for r in rows]

    def histories(self, keys: Sequence[Key]) -> Iterator[tuple[Any, ...]]:
        if not keys:
            return
        self._keys_table("_refold", keys)
        # Streamed (server-side cursor): a bulk re-fold never holds all histories here.
        with self.uow.conn.cursor(name="tally_fold_histories") as cur:
            cur.itersize = 20_000
            cur.execute(history_sql("_refold"))
            yield from cur

    def replace(self, cuts: Sequence[tuple[Key, int]], states: Iterable[tuple[Any, ...]], intervals: Iterable[tuple[Any, ...]]) -> None:
        cur = self.cur
        if cuts:
            cur.execute("CREATE TEMP TABLE IF NOT EXISTS _cuts (cloud TEXT, resource_type TEXT, resource_id TEXT, "
                        "from_no INTEGER) ON COMMIT DROP")
            cur.execute("TRUNCATE _cuts")
            with cur.copy("COPY _cuts FROM STDIN") as copy:
                for key, from_no in cuts:
                    copy.write_row((*key, from_no))
            cur.execute("ANALYZE _cuts")
            cur.execute(f"DELETE FROM resource_intervals t USING _cuts k WHERE {_KEY_MATCH} "
                        "AND t.interval_no >= k.from_no")
            cur.execute(f"DELETE FROM current_resources t USING _cuts k WHERE {_KEY_MATCH}")
        for table, columns, rows in (("current_resources", STATE_COLUMNS, states),
                                     ("resource_intervals", INTERVAL_COLUMNS, intervals)):
            with cur.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)

    def fold_in_sql(self, watermark: int, high: int, *, full: bool) -> int:
        cur = self.cur
        cur.execute(f"SET LOCAL work_mem = '{FOLD_WORK_MEM}'")
        # Let the history's sort run in parallel workers even where the planner's default costs
        # would not (a CREATE TABLE AS may use them; the floor it is compared with does).
        cur.execute("SET LOCAL parallel_setup_cost = 0")
        cur.execute("SET LOCAL parallel_tuple_cost = 0")
        if full:
            self._fold(source="events e", rewrite=True)
            return int(cur.execute("SELECT count(*) FROM current_resources").fetchone()[0])
        cur.execute(f"CREATE TEMP TABLE _touched ON COMMIT DROP AS "
                    f"SELECT DISTINCT {KEY} FROM events WHERE seq > %s AND seq <= %s", (watermark, high))
        cur.execute("ANALYZE _touched")
        touched, stored = cur.execute(f"SELECT (SELECT count(*) FROM _touched), ({_STORED_RESOURCES})").fetchone()
        if touched * 4 >= stored:
            # A quarter of the resources or more (a first import, a backlog after an outage):
            # folding everything and writing only what differs costs less than joining the log to
            # that many keys, which runs in one process (they are in a temporary table).
            self._fold(source="events e", rewrite=True)
            return int(touched)
        # their histories, read off the log once: the dictionaries and the fold both read them
        cur.execute(f"CREATE TEMP TABLE _touched_events ON COMMIT DROP AS SELECT e.* "
                    f"FROM events e JOIN _touched k ON {_EVENT_OF_TOUCHED}")
        cur.execute(f"DELETE FROM resource_intervals t USING _touched k WHERE {_KEY_MATCH}")
        cur.execute(f"DELETE FROM current_resources t USING _touched k WHERE {_KEY_MATCH}")
        self._fold(source="_touched_events e")
        return int(touched)

    def _fold(self, *, source: str, rewrite: bool = False) -> None:
        """Fold ``source``'s histories and write them: inserted (their old rows are gone), or with
        ``rewrite`` compared with the stored tables, which keep the rows that are unchanged."""
        cur = self.cur
        for statement in DICTIONARIES:
            cur.execute(statement.format(source=source))
        sizes, projects, statuses = cur.execute(DICTIONARY_SIZES).fetchone()
        if max(sizes, projects, statuses) > ID_MASK:  # a code would not hold the id: refuse rather than fold wrong
            raise ValueError(f"the SQL fold takes at most {ID_MASK} distinct sizes and projects "
                             f"({sizes} sizes, {projects} projects)")
        cur.execute(FOLD_TABLE.format(source=source))
        if rewrite:
            self._rewrite("current_resources", STATE_COLUMNS, STATE_KEY, STATE_SELECT)
            self._rewrite("resource_intervals", INTERVAL_COLUMNS, INTERVAL_KEY, INTERVALS_SELECT)
        else:
            cur.execute(insert_all("current_resources", STATE_COLUMNS, STATE_SELECT))
            cur.execute(insert_all("resource_intervals", INTERVAL_COLUMNS, INTERVALS_SELECT))
        cur.execute("DROP TABLE _fold")
        cur.execute(DROP_DICTIONARIES)

    def _rewrite(self, table: str, columns: tuple[str, ...], key: tuple[str, ...], select: str) -> None:
        """Make ``table`` hold the fold's rows (``select``), writing only the rows that differ.

        A rebuild where most rows stand (a fold-rule change that touches a few, a check after a
        restore) then writes little, leaves no dead rows behind and never locks readers out. When
        most stored rows differ, deleting each costs more than emptying the table and writing
        everything afresh, which it then does (TRUNCATE: readers wait for the rebuild's commit);
        an empty table (a first build) is filled that way without comparing.
        """
        cur = self.cur
        if cur.execute(f"SELECT NOT EXISTS (SELECT FROM {table})").fetchone()[0]:
            self._fill(table, columns, select)  # a first build: nothing to compare with
            return
        cur.execute(changed_rows(table, columns, key, select))
        differ, stored = cur.execute(changed_counts(table, key)).fetchone()
        if differ * 2 <= stored:
            for statement in write_changes(table, columns, key):
                cur.execute(statement)
            cur.execute("DROP TABLE _changed")
            return
        cur.execute("DROP TABLE _changed")
        cur.execute(f"TRUNCATE {table}")
        self._fill(table, columns, select)

    def _fill(self, table: str, columns: tuple[str, ...], select: str) -> None:
        """Write every row of the fold's ``select`` into the empty ``table``, its indexes built after.

        Building an index from the whole table sorts once; keeping it up to date row by row costs
        more (measured at 2M events: 740k intervals inserted in 4.1 s with both indexes, 0.55 s
        without them and 2.0 s for building them). Dropping an index locks the table until the
        commit (as TRUNCATE does), so nobody reads it without its indexes. Each index is rebuilt
        from its own definition in the catalogue, an analyst's own included.
        """
        cur = self.cur
        indexes = cur.execute(_INDEXES, (table,)).fetchall()
        for name, constraint, _ in indexes:
            cur.execute(f"ALTER TABLE {table} DROP CONSTRAINT {constraint}" if constraint else f"DROP INDEX {name}")
        cur.execute(insert_all(table, columns, select))
        cur.execute(f"SET LOCAL maintenance_work_mem = '{INDEX_BUILD_MEM}'")
        for _name, constraint, definition in indexes:
            cur.execute(f"ALTER TABLE {table} ADD CONSTRAINT {constraint} {definition}" if constraint else definition)

    def set_watermark(self, high: int) -> None:
        self.uow.execute("UPDATE projection_state SET watermark = %s WHERE name = 'resources'", (high,))

    def _keys_table(self, name: str, keys: Sequence[Key]) -> None:
        self.cur.execute(f"CREATE TEMP TABLE IF NOT EXISTS {name} (cloud TEXT, resource_type TEXT, resource_id TEXT) "
                         "ON COMMIT DROP")
        self.cur.execute(f"TRUNCATE {name}")
        with self.cur.copy(f"COPY {name} FROM STDIN") as copy:
            for key in keys:
                copy.write_row(key)
        self.cur.execute(f"ANALYZE {name}")
