"""The fold (``core/fold.py``) as one Postgres statement, for rebuilds and bulk refreshes.

The same rule as ``duckdb.fold`` (a property test holds both equal to the Python fold), written
for what Postgres lacks: there is no ``last_value … IGNORE NULLS``, so "the last create/update that
gave a project (size)" is a running ``max`` over values prefixed with the row's position in fold
order (fixed-width, so text order is position order), and the prefix is cut off when read.
Whether the resource was live just before a row compares the times of the last create and the
last delete before it: at equal times a delete sorts after a create, so a tie means not live.

Both window passes share one ordering (the inner one's output is already sorted), so the history
is sorted once; the fold rows are materialised once (spilling past ``work_mem``) and read by both
inserts of one statement.
"""

from __future__ import annotations

KEY = "cloud, resource_type, resource_id"
_ORDER = f"PARTITION BY {KEY} ORDER BY occurred_at, rank, event_id"
_POS = 12  # digits of the position prefix


def _last(value: str) -> str:
    """The value given by the last create/update (in the window's frame) that gave one, position-prefixed."""
    return f"max(CASE WHEN verb IN ('create', 'update') AND {value} IS NOT NULL " \
           f"THEN (lpad(rn::text, {_POS}, '0') || {value}) COLLATE \"C\" END)"


# ``{source}`` is ``events e`` or ``events e`` joined to the keys being refreshed. The fold's rows are
# written to a table (a CREATE TABLE AS may sort in parallel, an INSERT may not), read by both inserts.
FOLD_TABLE = f"""
CREATE TEMP TABLE _fold ON COMMIT DROP AS
SELECT {KEY}, seq, occurred_at, verb, rn, project_ff, size_ff, is_start, is_end, live_after,
       is_start OR is_end OR (is_update AND (substr(project_ff, {_POS + 1}) IS DISTINCT FROM substr(project_prev, {_POS + 1})
                                             OR substr(size_ff, {_POS + 1}) IS DISTINCT FROM substr(size_prev, {_POS + 1})))
           AS is_mark
FROM (
    SELECT *,
           verb = 'create' AND NOT live_before AS is_start,
           verb IN ('create', 'update') AND live_before AS is_update,
           verb = 'delete' AND live_before AS is_end,
           CASE verb WHEN 'create' THEN true WHEN 'delete' THEN false ELSE live_before END AS live_after,
           -- this row's own value when it gives one, else the last one before it
           CASE WHEN verb IN ('create', 'update') AND project_id IS NOT NULL
                THEN lpad(rn::text, {_POS}, '0') || project_id ELSE project_prev END AS project_ff,
           CASE WHEN verb IN ('create', 'update') AND size IS NOT NULL
                THEN lpad(rn::text, {_POS}, '0') || size ELSE size_prev END AS size_ff
    FROM (
        SELECT *,
               {_last("project_id")} OVER before AS project_prev,
               {_last("size")} OVER before AS size_prev
        FROM (
            SELECT *,
                   -- row_number ignores the frame: one window node computes all three
                   row_number() OVER before AS rn,
                   coalesce(max(occurred_at) FILTER (WHERE verb = 'create') OVER before
                            > coalesce(max(occurred_at) FILTER (WHERE verb = 'delete') OVER before, '-infinity'),
                            false) AS live_before
            FROM (
                SELECT e.cloud COLLATE "C" AS cloud, e.resource_type COLLATE "C" AS resource_type,
                       e.resource_id COLLATE "C" AS resource_id, e.seq, e.occurred_at, e.verb,
                       e.event_id COLLATE "C" AS event_id, e.project_id,
                       CASE e.verb WHEN 'create' THEN 0 WHEN 'update' THEN 1 WHEN 'note' THEN 2 ELSE 3 END AS rank,
                       nullif(e.payload -> 'size', 'null'::jsonb)::text AS size
                FROM {{source}}
            ) src
            WINDOW before AS ({_ORDER} ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
        ) numbered
        WINDOW before AS ({_ORDER} ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
    ) carried
) flagged
"""

STATE_INSERT = f"""
INSERT INTO current_resources (cloud, resource_type, resource_id, status, project_id, size, created_at,
                               deleted_at, last_event_at, last_seq, event_count)
SELECT {KEY},
       CASE WHEN created_at IS NULL THEN 'unborn' WHEN live THEN 'live' ELSE 'deleted' END,
       project_id, size::jsonb, created_at,
       CASE WHEN created_at IS NOT NULL AND NOT live THEN deleted_at END,
       last_event_at, last_seq, event_count
FROM (
    SELECT {KEY},
           -- live: the last create/delete is a create (at equal times the delete sorts after)
           coalesce(max(occurred_at) FILTER (WHERE verb = 'create')
                    > coalesce(max(occurred_at) FILTER (WHERE verb = 'delete'), '-infinity'), false) AS live,
           substr(max(project_ff) FILTER (WHERE live_after OR is_end), {_POS + 1}) AS project_id,
           substr(max(size_ff) FILTER (WHERE live_after OR is_end), {_POS + 1}) AS size,
           max(occurred_at) FILTER (WHERE is_start) AS created_at,
           max(occurred_at) FILTER (WHERE is_end) AS deleted_at,
           max(occurred_at) AS last_event_at, max(seq) AS last_seq, count(*) AS event_count
    FROM _fold
    GROUP BY {KEY}
) per_resource
"""

INTERVALS_INSERT = f"""
INSERT INTO resource_intervals (cloud, resource_type, resource_id, interval_no, lifecycle_no, project_id, size,
                                start_at, end_at)
SELECT {KEY}, row_number() OVER (PARTITION BY {KEY} ORDER BY rn) - 1, lifecycle_no,
       substr(project_ff, {_POS + 1}), substr(size_ff, {_POS + 1})::jsonb, occurred_at, next_at
FROM (
    SELECT {KEY}, rn, occurred_at, is_end, project_ff, size_ff,
           lead(occurred_at) OVER marks AS next_at,
           sum(CASE WHEN is_start THEN 1 ELSE 0 END) OVER marks - 1 AS lifecycle_no
    FROM _fold
    WHERE is_mark
    WINDOW marks AS (PARTITION BY {KEY} ORDER BY rn ROWS UNBOUNDED PRECEDING)
) marks
WHERE NOT is_end AND (next_at IS NULL OR next_at > occurred_at)
"""
