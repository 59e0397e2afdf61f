-- An event's identity is (cloud, event_id): the same id in two clouds is two events, so one cloud's
-- writer can neither shadow another cloud's events nor learn which ids it holds.
-- DuckDB cannot change a primary key in place: the table is copied into one with the new key
-- (every row keeps its seq; the sequence goes on from where it was).
CREATE TABLE events_0007 (
    seq           BIGINT      NOT NULL DEFAULT nextval('events_seq'),
    event_id      TEXT        NOT NULL,
    event_type    TEXT        NOT NULL,
    verb          TEXT        NOT NULL CHECK (verb IN ('create', 'update', 'note', 'delete')),
    cloud         TEXT        NOT NULL,
    resource_type TEXT        NOT NULL,
    resource_id   TEXT        NOT NULL,
    project_id    TEXT,
    occurred_at   TIMESTAMPTZ NOT NULL,
    source        TEXT        NOT NULL CHECK (source IN ('collector', 'reconciliation')),
    payload       JSON        NOT NULL,
    content_hash  TEXT        NOT NULL,
    received_at   TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (cloud, event_id)
);

-- A size is stored in the form the meters read: a whole-number float in a size field (2.0, which
-- older releases stored as sent) becomes the integer (2), in the same copy. Only the size object's
-- own fields are rewritten (the meters read nothing deeper); the content hash of a rewritten event
-- is left as it was, so a later copy of it resent with 2.0 is answered duplicate with conflict: true
-- once. The projection is refolded from the first rewritten event on.
CREATE TEMP TABLE size_fix_0007 AS
SELECT ev.cloud, ev.event_id, ev.seq,
       json_group_object(e.key, CASE
           WHEN e.type = 'DOUBLE' AND TRY_CAST(e.value::VARCHAR AS DOUBLE) = floor(TRY_CAST(e.value::VARCHAR AS DOUBLE))
                AND abs(TRY_CAST(e.value::VARCHAR AS DOUBLE)) < 9.2e18
           THEN to_json(CAST(TRY_CAST(e.value::VARCHAR AS DOUBLE) AS BIGINT)) ELSE e.value END) AS size
FROM events ev, json_each(ev.payload -> '$.size') AS e
WHERE json_type(ev.payload, '$.size') = 'OBJECT'
GROUP BY ev.cloud, ev.event_id, ev.seq
HAVING bool_or(e.type = 'DOUBLE' AND TRY_CAST(e.value::VARCHAR AS DOUBLE) = floor(TRY_CAST(e.value::VARCHAR AS DOUBLE))
               AND abs(TRY_CAST(e.value::VARCHAR AS DOUBLE)) < 9.2e18);
CREATE TEMP TABLE payload_fix_0007 AS
SELECT ev.cloud, ev.event_id, json_group_object(p.key, CASE WHEN p.key = 'size' THEN f.size ELSE p.value END) AS payload
FROM events ev JOIN size_fix_0007 f USING (cloud, event_id), json_each(ev.payload) AS p
GROUP BY ev.cloud, ev.event_id;

INSERT INTO events_0007
SELECT ev.seq, ev.event_id, ev.event_type, ev.verb, ev.cloud, ev.resource_type, ev.resource_id, ev.project_id,
       ev.occurred_at, ev.source, coalesce(f.payload, ev.payload), ev.content_hash, ev.received_at
FROM events ev LEFT JOIN payload_fix_0007 f USING (cloud, event_id);
DROP TABLE events;
ALTER TABLE events_0007 RENAME TO events;
UPDATE projection_state SET watermark = least(watermark, (SELECT min(seq) - 1 FROM size_fix_0007))
WHERE name = 'resources' AND EXISTS (SELECT 1 FROM size_fix_0007);
DROP TABLE size_fix_0007;
DROP TABLE payload_fix_0007;

-- The dead letter has limits. One duplicate_conflict row per (cloud, event_id, content): conflict_key
-- is the content hash of the conflicting copy (NULL for every other reason, and NULLs never collide
-- in a unique index), repeats counts the copies received, last_received_at the latest one.
ALTER TABLE rejected_events ADD COLUMN conflict_key TEXT;
ALTER TABLE rejected_events ADD COLUMN repeats BIGINT DEFAULT 1;
ALTER TABLE rejected_events ADD COLUMN last_received_at TIMESTAMPTZ;
CREATE UNIQUE INDEX rejected_events_conflicts ON rejected_events (cloud, event_id, conflict_key);
