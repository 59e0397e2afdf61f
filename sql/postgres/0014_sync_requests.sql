-- Reconciliation runs started through the API (POST /internal/sync/{cloud}): who runs each (the API
-- process's own worker, or a Dagster run), and the caller's Idempotency-Key, so that a retried POST
-- answers the same run from any API process, before and after a restart.
CREATE TABLE sync_requests (
    run_id          TEXT        NOT NULL PRIMARY KEY,  -- the sync_runs row it started
    cloud           TEXT        NOT NULL,
    idempotency_key TEXT,                              -- the caller's Idempotency-Key header, if any
    requested_at    TIMESTAMPTZ NOT NULL,
    executor        TEXT        NOT NULL CHECK (executor IN ('api', 'dagster')),
    dagster_run_id  TEXT,                              -- the Dagster run that executes it (executor dagster)
    UNIQUE (cloud, idempotency_key)
);
