"""The fold (``core/fold.py``) expressed as DuckDB window functions, for rebuilds and refreshes.

The Python fold is the rule; this is the same rule, vectorised, and a property test holds the two
equal. One window pass over every event does the heavy work (sorting each history once):

1. each resource's events numbered in fold order (occurred_at, verb rank, event_id);
2. whether it was live just before: the last create-or-delete before it is a create;
3. project and size carried forward from the last create or update. This ignores liveness, and
   may differ from the rule only on rows outside every lifecycle (an update before any create or
   after a delete is not effective): inside a lifecycle the last create-or-update is the create
   that opened it or an effective update after it. So those rows' carried values are never read:
   intervals are cut only at starts, effective changes and ends, and the state takes its project
   and size from the last row inside a lifecycle.
4. the platform status carried forward the same way, from the last create or update that gives
   one, where a create always gives one: its status, or '' for none (read back as NULL). So a
   lifecycle's status never comes from before its create, as in the Python fold.

Then the few boundary rows (starts, effective changes, ends) give the intervals, their lifecycle
numbers and ends, and a grouped pass gives each resource's state.
"""

from __future__ import annotations

KEY = "cloud, resource_type, resource_id"

# ``{source}`` is ``folded_events`` (the fold's columns of the log, ``size`` taken out of the
# payload), or that joined to the keys being refreshed. ``resource_key`` is carried through to the
# projection tables.
FOLD_CTE = f"""
ev AS (
    SELECT {KEY}, resource_key, seq, event_id, verb, project_id, occurred_at, status_given,
           row_number() OVER w_fold AS rn,
           coalesce(last_value(CASE WHEN verb IN ('create', 'delete') THEN verb END IGNORE NULLS) OVER (
               w_fold ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
           ) = 'create', false) AS live_before,
           last_value(CASE WHEN verb IN ('create', 'update') THEN project_id END IGNORE NULLS) OVER (
               w_fold ROWS UNBOUNDED PRECEDING) AS project_ff,
           last_value(CASE WHEN verb IN ('create', 'update') THEN size END IGNORE NULLS) OVER (
               w_fold ROWS UNBOUNDED PRECEDING) AS size_ff,
           last_value(CASE WHEN verb IN ('create', 'update') THEN project_id END IGNORE NULLS) OVER (
               w_fold ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS project_prev,
           last_value(CASE WHEN verb IN ('create', 'update') THEN size END IGNORE NULLS) OVER (
               w_fold ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS size_prev,
           last_value(status_given IGNORE NULLS) OVER (w_fold ROWS UNBOUNDED PRECEDING) AS status_ff,
           last_value(status_given IGNORE NULLS) OVER (
               w_fold ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS status_prev
    FROM (SELECT *, CASE verb WHEN 'create' THEN coalesce(status, '') WHEN 'update' THEN status END AS status_given
          FROM {{source}}) src
    WINDOW w_fold AS (
        PARTITION BY {KEY}
        ORDER BY occurred_at,
                 CASE verb WHEN 'create' THEN 0 WHEN 'update' THEN 1 WHEN 'note' THEN 2 ELSE 3 END,
                 event_id
    )
),
l2 AS (
    SELECT *,
           verb = 'create' AND NOT live_before AS is_start,
           verb IN ('create', 'update') AND live_before AS is_update,
           verb = 'delete' AND live_before AS is_end,
           CASE verb WHEN 'create' THEN true WHEN 'delete' THEN false ELSE live_before END AS live_after
    FROM ev
)
"""

# The fold's rows, materialised once per refresh: both tables are read off this.
FOLD_TABLE = f"""
CREATE OR REPLACE TEMP TABLE _fold AS
WITH {FOLD_CTE}
SELECT {KEY}, resource_key, seq, rn, occurred_at, live_after, live_before, is_start, is_update, is_end,
       project_ff, size_ff, project_prev, size_prev, status_ff, status_prev
FROM l2
"""

INTERVALS_SELECT = f"""
WITH marks AS (
    SELECT {KEY}, resource_key, rn, occurred_at, is_end, project_ff, size_ff, status_ff,
           lead(occurred_at) OVER w_marks AS next_at,
           sum(CASE WHEN is_start THEN 1 ELSE 0 END) OVER (w_marks ROWS UNBOUNDED PRECEDING) - 1 AS lifecycle_no,
           NOT is_end AS is_boundary
    FROM _fold
    WHERE is_end
       OR is_start
       OR (is_update AND (project_ff IS DISTINCT FROM project_prev OR size_ff IS DISTINCT FROM size_prev
                          OR status_ff IS DISTINCT FROM status_prev))
    WINDOW w_marks AS (PARTITION BY {KEY} ORDER BY rn)
)
SELECT {KEY},
       (row_number() OVER (PARTITION BY {KEY} ORDER BY rn) - 1)::INTEGER AS interval_no,
       lifecycle_no::INTEGER AS lifecycle_no,
       project_ff AS project_id,
       size_ff AS size,
       occurred_at AS start_at,
       next_at AS end_at,
       nullif(status_ff, '') AS platform_status,
       resource_key
FROM marks
WHERE is_boundary AND (next_at IS NULL OR next_at > occurred_at)
"""

STATE_SELECT = f"""
SELECT {KEY},
       CASE WHEN NOT bool_or(is_start) THEN 'unborn'
            WHEN arg_max(live_after, rn) THEN 'live'
            ELSE 'deleted' END AS status,
       arg_max(project_ff, rn) FILTER (WHERE live_after OR is_end) AS project_id,
       arg_max(size_ff, rn) FILTER (WHERE live_after OR is_end) AS size,
       max(CASE WHEN is_start THEN occurred_at END) AS created_at,
       CASE WHEN bool_or(is_start) AND NOT arg_max(live_after, rn)
            THEN max(CASE WHEN is_end THEN occurred_at END) END AS deleted_at,
       max(occurred_at) AS last_event_at,
       max(seq) AS last_seq,
       count(*)::INTEGER AS event_count,
       nullif(arg_max(status_ff, rn) FILTER (WHERE live_after OR is_end), '') AS platform_status,
       any_value(resource_key) AS resource_key
FROM _fold
GROUP BY {KEY}
"""
