-- The event log (one row per distinct event_id) and the dead letter.
CREATE SEQUENCE events_seq START 1;
CREATE TABLE events (
    seq           BIGINT      NOT NULL DEFAULT nextval('events_seq'),
    event_id      TEXT        NOT NULL PRIMARY KEY,
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
    received_at   TIMESTAMPTZ NOT NULL
);

CREATE SEQUENCE rejected_events_seq START 1;
CREATE TABLE rejected_events (
    id          BIGINT      NOT NULL PRIMARY KEY DEFAULT nextval('rejected_events_seq'),
    received_at TIMESTAMPTZ NOT NULL,
    reason      TEXT        NOT NULL,
    message     TEXT        NOT NULL,
    origin      TEXT        NOT NULL,
    cloud       TEXT,
    event_id    TEXT,
    raw         TEXT
);
