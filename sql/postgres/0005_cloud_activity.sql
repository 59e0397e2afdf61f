-- Per cloud: when collector events last arrived, and how many. Kept by the ingest transaction so the
-- "events silent" alert (API /metrics, Dagster sensor and check) never has to scan the event log.
CREATE TABLE cloud_activity (
    cloud                   TEXT        NOT NULL PRIMARY KEY,
    first_collector_event   TIMESTAMPTZ,
    last_collector_event    TIMESTAMPTZ,
    collector_events        BIGINT      NOT NULL DEFAULT 0,
    reconciliation_events   BIGINT      NOT NULL DEFAULT 0
);
