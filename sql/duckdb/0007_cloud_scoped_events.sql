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
INSERT INTO events_0007
SELECT seq, event_id, event_type, verb, cloud, resource_type, resource_id, project_id, occurred_at, source,
       payload, content_hash, received_at
FROM events;
DROP TABLE events;
ALTER TABLE events_0007 RENAME TO events;
