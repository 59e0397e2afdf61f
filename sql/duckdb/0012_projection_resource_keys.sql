-- A compact key per resource, so that a refresh finds the few resources it touches through ART
-- indexes instead of scanning the key columns of the projection tables and of the log. DuckDB
-- probes an ART index only for a filter of constants on one indexed column, so the key is one
-- BIGINT: the first 60 bits of the md5 of the resource's key (md5's hex digits are the same in
-- every DuckDB version; hash() is not). Distinct resources may share a key: every reader compares
-- the full key as well.
CREATE MACRO tally_resource_key(cloud, resource_type, resource_id) AS
    ('0x' || md5(cloud || chr(31) || resource_type || chr(31) || resource_id)[1:15])::BIGINT;

-- DuckDB cannot index a column updated in the same transaction: each projection table is copied
-- into one with the key (the last column), then indexed.
CREATE TABLE current_resources_0012 (
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
    event_count   INTEGER     NOT NULL,
    resource_key  BIGINT      NOT NULL
);
INSERT INTO current_resources_0012
SELECT *, tally_resource_key(cloud, resource_type, resource_id) FROM current_resources;
DROP TABLE current_resources;
ALTER TABLE current_resources_0012 RENAME TO current_resources;
CREATE INDEX current_resources_by_key ON current_resources (resource_key);

CREATE TABLE resource_intervals_0012 (
    cloud         TEXT        NOT NULL,
    resource_type TEXT        NOT NULL,
    resource_id   TEXT        NOT NULL,
    interval_no   INTEGER     NOT NULL,
    lifecycle_no  INTEGER     NOT NULL,
    project_id    TEXT        NOT NULL,
    size          JSON        NOT NULL,
    start_at      TIMESTAMPTZ NOT NULL,
    end_at        TIMESTAMPTZ,
    resource_key  BIGINT      NOT NULL
);
INSERT INTO resource_intervals_0012
SELECT *, tally_resource_key(cloud, resource_type, resource_id) FROM resource_intervals;
DROP TABLE resource_intervals;
ALTER TABLE resource_intervals_0012 RENAME TO resource_intervals;
CREATE INDEX resource_intervals_by_key ON resource_intervals (resource_key);

-- The folded events, as the fold reads them (its columns of every event with seq <= the
-- projection's watermark, the size already taken out of the payload), indexed by resource key:
-- a late event's resource is re-folded from here. The refresh appends what it folds, in seq order.
CREATE TABLE folded_events (
    resource_key  BIGINT      NOT NULL,
    cloud         TEXT        NOT NULL,
    resource_type TEXT        NOT NULL,
    resource_id   TEXT        NOT NULL,
    event_id      TEXT        NOT NULL,
    verb          TEXT        NOT NULL,
    occurred_at   TIMESTAMPTZ NOT NULL,
    project_id    TEXT,
    size          JSON,
    seq           BIGINT      NOT NULL
);
INSERT INTO folded_events
SELECT tally_resource_key(cloud, resource_type, resource_id), cloud, resource_type, resource_id, event_id, verb,
       occurred_at, project_id, json_extract(payload, '$.size'), seq
FROM events
WHERE seq <= (SELECT watermark FROM projection_state WHERE name = 'resources')
ORDER BY seq;
CREATE INDEX folded_events_by_key ON folded_events (resource_key);
