-- Projections: each resource's folded state and its lifecycle intervals, kept incrementally.
-- No primary keys here: the fold writes each key once by construction, and DuckDB's index upkeep
-- would cost more than the fold itself on every refresh (Postgres keeps its keys).
CREATE TABLE current_resources (
    cloud         TEXT        NOT NULL,
    resource_type TEXT        NOT NULL,
    resource_id   TEXT        NOT NULL,
    status        TEXT        NOT NULL CHECK (status IN ('live', 'deleted', 'unborn')),
    project_id    TEXT,
    size          JSON,
    created_at    TIMESTAMPTZ,
    deleted_at    TIMESTAMPTZ,
    last_event_at TIMESTAMPTZ NOT NULL,
    last_seq      BIGINT      NOT NULL,
    event_count   INTEGER     NOT NULL
);

CREATE TABLE resource_intervals (
    cloud         TEXT        NOT NULL,
    resource_type TEXT        NOT NULL,
    resource_id   TEXT        NOT NULL,
    interval_no   INTEGER     NOT NULL,
    lifecycle_no  INTEGER     NOT NULL,
    project_id    TEXT        NOT NULL,
    size          JSON        NOT NULL,
    start_at      TIMESTAMPTZ NOT NULL,
    end_at        TIMESTAMPTZ
);

-- How far the projection has folded the event log: every event with seq <= watermark is folded.
CREATE TABLE projection_state (
    name      TEXT   NOT NULL PRIMARY KEY,
    watermark BIGINT NOT NULL
);
INSERT INTO projection_state VALUES ('resources', 0);
