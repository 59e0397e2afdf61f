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

-- Resources touched by events stored since the last refresh. The generation lets a refresh delete
-- only the marks it has folded: a mark bumped meanwhile survives for the next refresh.
CREATE TABLE projection_dirty (
    cloud         TEXT   NOT NULL,
    resource_type TEXT   NOT NULL,
    resource_id   TEXT   NOT NULL,
    generation    BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (cloud, resource_type, resource_id)
);
