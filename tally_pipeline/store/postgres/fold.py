"""The fold (``core/fold.py``) as Postgres statements, for rebuilds and bulk refreshes.

The same rule as ``duckdb.fold`` (a property test holds both equal to the Python fold), written
for what Postgres lacks and for what its sort and window passes cost:

- **Values as small integers.** Postgres has no ``last_value … IGNORE NULLS``, so "the last
  create/update that gave a project (size)" is a running ``max`` over a code that puts the row's
  position in fold order in the high bits and the value's id in the low bits. The ids come from
  two dictionaries of the distinct projects and sizes, built first in one grouped pass. So the
  sort and both window passes carry two integers instead of the size's JSON text, and the running
  ``max`` compares integers, not position-prefixed strings. Sizes are told apart by jsonb
  equality; they hold only whole numbers and strings (the size schemas refuse fractions and
  normalise ``2.0`` at ingest), for which that is equality of their text.
- **A hash before the key.** Histories are sorted by the 64-bit hash of the resource key (the one
  ``events_by_resource`` holds) and then by the key itself: two resources almost never compare
  their text, which made the sort 2.7 times faster. A collision only puts two resources next to
  each other; the key columns still part them.
- **Only the rows the tables are read from.** The fold's rows kept are the interval boundaries
  (starts, effective changes, ends) and each resource's last row, which carries what the state
  needs of the whole history (its position is the event count; a running ``max`` the last seq).

The platform status is carried like the size, through a third dictionary, except that a create
always gives one: its status, or '' for none (read back as NULL), so a lifecycle's status never
comes from before its create (the Python fold's rule).

Whether the resource was live just before a row is read off the code of the last create or
delete before it (its position, and one bit: create). Both window passes share one ordering (the
inner one's output is already sorted), so the history is sorted once, in parallel where the
planner can: the dictionaries are unlogged tables, not temporary ones, because parallel workers
cannot read the leader's temporary tables. They live for the transaction only (refreshes and
rebuilds hold the projection lock, so two never meet).
"""

from __future__ import annotations

from tally_pipeline.store.postgres.resource_key import resource_hash

KEY = "cloud, resource_type, resource_id"
# A code is (position << ID_BITS) | id: ids below 2**31, positions (events of one resource) below 2**32.
ID_BITS = 31
ID_MASK = (1 << ID_BITS) - 1
SIZES = "tally_fold_sizes"
PROJECTS = "tally_fold_projects"
STATUSES = "tally_fold_statuses"
_ORDER = f"PARTITION BY rkey, {KEY} ORDER BY occurred_at, rank, event_id"
_SIZE = "nullif(e.payload -> 'size', 'null'::jsonb)"
# What a row gives of the platform status (see the module's note): NULL keeps the current one.
_STATUS = ("CASE e.verb WHEN 'create' THEN coalesce(nullif(e.payload ->> 'status', ''), '') "
           "WHEN 'update' THEN nullif(e.payload ->> 'status', '') END")

# ``{source}`` is ``events e``, or a bulk refresh's touched histories copied to ``_touched_events e``.
DICTIONARIES = (
    (f"CREATE TEMP TABLE _fold_values ON COMMIT DROP AS "
     f"SELECT {_SIZE} AS size, e.project_id, {_STATUS} AS status FROM {{source}} GROUP BY 1, 2, 3"),
    (f"CREATE UNLOGGED TABLE {SIZES} AS SELECT row_number() OVER () AS id, size "
     "FROM (SELECT DISTINCT size FROM _fold_values WHERE size IS NOT NULL) d"),
    (f"CREATE UNLOGGED TABLE {PROJECTS} AS SELECT row_number() OVER () AS id, project_id "
     "FROM (SELECT DISTINCT project_id FROM _fold_values WHERE project_id IS NOT NULL) d"),
    (f"CREATE UNLOGGED TABLE {STATUSES} AS SELECT row_number() OVER () AS id, status "
     "FROM (SELECT DISTINCT status FROM _fold_values WHERE status IS NOT NULL) d"),
    f"ANALYZE {SIZES}",
    f"ANALYZE {PROJECTS}",
    f"ANALYZE {STATUSES}",
)
DICTIONARY_SIZES = (f"SELECT (SELECT count(*) FROM {SIZES}), (SELECT count(*) FROM {PROJECTS}), "
                    f"(SELECT count(*) FROM {STATUSES})")
DROP_DICTIONARIES = f"DROP TABLE {SIZES}, {PROJECTS}, {STATUSES}, _fold_values"


def _last(value: str) -> str:
    """The code of the last create/update (in the window's frame) that gave a ``value`` id."""
    return f"max(CASE WHEN rank <= 1 AND {value} IS NOT NULL THEN (rn << {ID_BITS}) | {value} END)"


FOLD_TABLE = f"""
CREATE TEMP TABLE _fold ON COMMIT DROP AS
SELECT rkey, {KEY}, occurred_at, rn, is_start, is_end, live_after, is_last, is_mark, pid_ff, sid_ff, tid_ff, last_seq
FROM (
    SELECT *,
           is_start OR is_end OR (is_update AND (pid_ff IS DISTINCT FROM pid_prev OR sid_ff IS DISTINCT FROM sid_prev
                                                 OR tid_ff IS DISTINCT FROM tid_prev))
               AS is_mark,
           CASE WHEN is_last THEN greatest(seq, seq_before) END AS last_seq
    FROM (
        SELECT *,
               rank = 0 AND NOT live_before AS is_start,
               rank <= 1 AND live_before AS is_update,
               rank = 3 AND live_before AS is_end,
               CASE rank WHEN 0 THEN true WHEN 3 THEN false ELSE live_before END AS live_after,
               -- this row's own value when it gives one, else the last one before it
               CASE WHEN rank <= 1 AND pid IS NOT NULL THEN pid ELSE pid_prev END AS pid_ff,
               CASE WHEN rank <= 1 AND sid IS NOT NULL THEN sid ELSE sid_prev END AS sid_ff,
               CASE WHEN rank <= 1 AND tid IS NOT NULL THEN tid ELSE tid_prev END AS tid_ff
        FROM (
            SELECT rkey, {KEY}, seq, occurred_at, rank, rn, is_last, pid, sid, tid,
                   -- live just before: the last create or delete before this row is a create
                   coalesce((max(CASE WHEN rank IN (0, 3) THEN rn * 2 + (rank = 0)::int END) OVER before) % 2 = 1,
                            false) AS live_before,
                   ({_last("pid")} OVER before) & {ID_MASK} AS pid_prev,
                   ({_last("sid")} OVER before) & {ID_MASK} AS sid_prev,
                   ({_last("tid")} OVER before) & {ID_MASK} AS tid_prev,
                   max(seq) OVER before AS seq_before
            FROM (
                SELECT *,
                       -- row_number and lead ignore the frame
                       row_number() OVER before AS rn,
                       lead(rank) OVER before IS NULL AS is_last
                FROM (
                    SELECT {resource_hash("e.cloud", "e.resource_type", "e.resource_id")} AS rkey,
                           e.cloud COLLATE "C" AS cloud, e.resource_type COLLATE "C" AS resource_type,
                           e.resource_id COLLATE "C" AS resource_id, e.seq, e.occurred_at,
                           e.event_id COLLATE "C" AS event_id,
                           CASE e.verb WHEN 'create' THEN 0 WHEN 'update' THEN 1 WHEN 'note' THEN 2 ELSE 3 END AS rank,
                           p.id AS pid, s.id AS sid, t.id AS tid
                    FROM {{source}}
                    LEFT JOIN {PROJECTS} p ON p.project_id = e.project_id
                    LEFT JOIN {SIZES} s ON s.size = {_SIZE}
                    LEFT JOIN {STATUSES} t ON t.status = {_STATUS}
                ) src
                WINDOW before AS ({_ORDER} ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
            ) numbered
            WINDOW before AS ({_ORDER} ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
        ) carried
    ) flagged
) folded
WHERE is_mark OR is_last
"""

# Each resource's state, from its boundaries and last row. Its project and size are those of the
# last row where it was live or ended: the last row when it is live, else its last end (a mark).
STATE_SELECT = f"""
SELECT r.cloud, r.resource_type, r.resource_id,
       CASE WHEN r.created_at IS NULL THEN 'unborn' WHEN r.live THEN 'live' ELSE 'deleted' END AS status,
       p.project_id, s.size, r.created_at,
       CASE WHEN r.created_at IS NOT NULL AND NOT r.live THEN r.deleted_at END AS deleted_at,
       r.last_event_at, r.last_seq, r.event_count::integer AS event_count, nullif(t.status, '') AS platform_status
FROM (
    SELECT {KEY},
           bool_or(live_after) FILTER (WHERE is_last) AS live,
           max((rn << {ID_BITS}) | pid_ff) FILTER (WHERE live_after OR is_end) & {ID_MASK} AS pid,
           max((rn << {ID_BITS}) | sid_ff) FILTER (WHERE live_after OR is_end) & {ID_MASK} AS sid,
           max((rn << {ID_BITS}) | tid_ff) FILTER (WHERE live_after OR is_end) & {ID_MASK} AS tid,
           max(occurred_at) FILTER (WHERE is_start) AS created_at,
           max(occurred_at) FILTER (WHERE is_end) AS deleted_at,
           max(occurred_at) AS last_event_at, max(last_seq) AS last_seq, max(rn) AS event_count
    FROM _fold
    GROUP BY rkey, {KEY}
) r
LEFT JOIN {PROJECTS} p ON p.id = r.pid
LEFT JOIN {SIZES} s ON s.id = r.sid
LEFT JOIN {STATUSES} t ON t.id = r.tid
"""

INTERVALS_SELECT = f"""
SELECT m.cloud, m.resource_type, m.resource_id, m.interval_no::integer AS interval_no,
       m.lifecycle_no::integer AS lifecycle_no, p.project_id, s.size, m.occurred_at AS start_at, m.next_at AS end_at,
       nullif(t.status, '') AS platform_status
FROM (
    SELECT {KEY}, row_number() OVER (PARTITION BY rkey, {KEY} ORDER BY rn) - 1 AS interval_no, lifecycle_no,
           pid_ff, sid_ff, tid_ff, occurred_at, next_at
    FROM (
        SELECT rkey, {KEY}, rn, occurred_at, is_end, pid_ff, sid_ff, tid_ff,
               lead(occurred_at) OVER marks AS next_at,
               sum(CASE WHEN is_start THEN 1 ELSE 0 END) OVER marks - 1 AS lifecycle_no
        FROM _fold
        WHERE is_mark
        -- the order the fold wrote _fold in: this sort finds its input in order
        WINDOW marks AS (PARTITION BY rkey, {KEY} ORDER BY rn ROWS UNBOUNDED PRECEDING)
    ) marks
    WHERE NOT is_end AND (next_at IS NULL OR next_at > occurred_at)
) m
LEFT JOIN {PROJECTS} p ON p.id = m.pid_ff
LEFT JOIN {SIZES} s ON s.id = m.sid_ff
LEFT JOIN {STATUSES} t ON t.id = m.tid_ff
"""


def insert_all(table: str, columns: tuple[str, ...], select: str) -> str:
    """SQL: insert every row of the fold's ``select`` into ``table``."""
    return f"INSERT INTO {table} ({', '.join(columns)}) {select}"


def changed_rows(table: str, columns: tuple[str, ...], key: tuple[str, ...], select: str) -> str:
    """SQL: ``_changed``, the fold's rows (``select``) that differ from ``table``'s, with the stored
    key of each stored row that differs (``old_<key>``; NULL for a new key).

    One join compares the two: rows equal to their re-fold (sizes compared as jsonb) are not in it.
    """
    old = ", ".join(f"t.{c} AS old_{c}" for c in key)
    same = " AND ".join(f"n.{c} IS NOT DISTINCT FROM t.{c}" for c in columns if c not in key)
    return (f"CREATE TEMP TABLE _changed ON COMMIT DROP AS SELECT n.*, {old} "
            f"FROM ({select}) n FULL JOIN {table} t ON {' AND '.join(f'n.{c} = t.{c}' for c in key)} "
            f"WHERE n.{key[0]} IS NULL OR t.{key[0]} IS NULL OR NOT ({same})")


def changed_counts(table: str, key: tuple[str, ...]) -> str:
    """SQL: (stored rows that differ, all stored rows) of ``table``, after ``changed_rows``."""
    return f"SELECT count(old_{key[0]}), (SELECT count(*) FROM {table}) FROM _changed"


def write_changes(table: str, columns: tuple[str, ...], key: tuple[str, ...]) -> tuple[str, str]:
    """SQL: delete the stored rows that differ, insert the fold's rows that are not stored."""
    names = ", ".join(columns)
    return (f"DELETE FROM {table} t USING _changed c WHERE {' AND '.join(f't.{c} = c.old_{c}' for c in key)}",
            f"INSERT INTO {table} ({names}) SELECT {names} FROM _changed WHERE {key[0]} IS NOT NULL")
