-- Projections: each resource's folded state and its lifecycle intervals, kept incrementally.
CREATE TABLE current_resources (
    cloud         TEXT        NOT NULL,
    resource_type TEXT        NOT NULL,
    resource_id   TEXT        NOT NULL,
    status        TEXT        NOT NULL CHECK (status IN ('live', 'deleted', 'unborn')),
    project_id    TEXT,
    size          JSONB,
    created_at    TIMESTAMPTZ,
    deleted_at    TIMESTAMPTZ,
    last_event_at TIMESTAMPTZ NOT NULL,
    last_seq      BIGINT      NOT NULL,
    event_count   INTEGER     NOT NULL,
    PRIMARY KEY (cloud, resource_type, resource_id)
);
CREATE INDEX current_resources_by_status ON current_resources (cloud, status, resource_type);

CREATE TABLE resource_intervals (
    cloud         TEXT        NOT NULL,
    resource_type TEXT        NOT NULL,
    resource_id   TEXT        NOT NULL,
    interval_no   INTEGER     NOT NULL,
    lifecycle_no  INTEGER     NOT NULL,
    project_id    TEXT        NOT NULL,
    size          JSONB       NOT NULL,
    start_at      TIMESTAMPTZ NOT NULL,
    end_at        TIMESTAMPTZ,
    PRIMARY KEY (cloud, resource_type, resource_id, interval_no)
);
CREATE INDEX resource_intervals_by_project ON resource_intervals (cloud, project_id, resource_type);

-- How far the projection has folded the event log: every event with seq <= watermark is folded.
-- Ingest holds a shared advisory lock while it writes; the refresh takes it exclusively for an
-- instant to read a sequence value below which every event is committed (seq is not commit order).
CREATE TABLE projection_state (
    name      TEXT   NOT NULL PRIMARY KEY,
    watermark BIGINT NOT NULL
);
INSERT INTO projection_state VALUES ('resources', 0);

-- The refresh finds the resources touched since the watermark by seq.
CREATE INDEX events_by_seq ON events (seq);
