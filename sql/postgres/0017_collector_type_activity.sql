-- Per cloud and resource type: when collector events of that type last arrived, and how many. Kept
-- by the ingest transaction beside cloud_activity, so the "service events silent" alert (a type the
-- sync keeps correcting while the collector carries none of it: its service publishes where the
-- collector does not listen) never has to scan the event log.
CREATE TABLE collector_type_activity (
    cloud                   TEXT        NOT NULL,
    resource_type           TEXT        NOT NULL,
    first_collector_event   TIMESTAMPTZ NOT NULL,
    last_collector_event    TIMESTAMPTZ NOT NULL,
    collector_events        BIGINT      NOT NULL,
    PRIMARY KEY (cloud, resource_type)
);
-- What the log holds already (one pass over it, once): an upgraded deployment starts with the truth,
-- not with every type "never seen".
INSERT INTO collector_type_activity
SELECT cloud, resource_type, min(received_at), max(received_at), count(*)
FROM events WHERE source = 'collector' GROUP BY cloud, resource_type;
