-- The event log (one row per distinct event_id) and the dead letter.
CREATE TABLE events (
    seq           BIGINT GENERATED ALWAYS AS IDENTITY,
    event_id      TEXT        NOT NULL PRIMARY KEY,
    event_type    TEXT        NOT NULL,
    verb          TEXT        NOT NULL CHECK (verb IN ('create', 'update', 'note', 'delete')),
    cloud         TEXT        NOT NULL,
    resource_type TEXT        NOT NULL,
    resource_id   TEXT        NOT NULL,
    project_id    TEXT,
    occurred_at   TIMESTAMPTZ NOT NULL,
    source        TEXT        NOT NULL CHECK (source IN ('collector', 'reconciliation')),
    payload       JSONB       NOT NULL,
    content_hash  TEXT        NOT NULL,
    received_at   TIMESTAMPTZ NOT NULL
);
-- A resource's history, read by the fold and the history endpoint.
CREATE INDEX events_by_resource ON events (cloud, resource_type, resource_id, occurred_at);

CREATE TABLE rejected_events (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    received_at TIMESTAMPTZ NOT NULL,
    reason      TEXT        NOT NULL,
    message     TEXT        NOT NULL,
    origin      TEXT        NOT NULL,
    cloud       TEXT,
    event_id    TEXT,
    raw         TEXT
);
CREATE INDEX rejected_events_by_time ON rejected_events (received_at);
