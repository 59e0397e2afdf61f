-- Reconciliation runs, what they deferred, and the per-cloud lock that keeps two runs apart.
CREATE TABLE sync_runs (
    run_id       TEXT        NOT NULL PRIMARY KEY,
    cloud        TEXT        NOT NULL,
    run_key      TEXT        NOT NULL,
    poll_time    TIMESTAMPTZ NOT NULL,
    started_at   TIMESTAMPTZ NOT NULL,
    finished_at  TIMESTAMPTZ,
    status       TEXT        NOT NULL CHECK (status IN ('running', 'succeeded', 'partial', 'failed')),
    per_type     JSONB,
    error        TEXT,
    created      INTEGER     NOT NULL DEFAULT 0,
    updated      INTEGER     NOT NULL DEFAULT 0,
    deleted      INTEGER     NOT NULL DEFAULT 0,
    recovered    INTEGER     NOT NULL DEFAULT 0,
    deferred     INTEGER     NOT NULL DEFAULT 0,
    live_before  INTEGER     NOT NULL DEFAULT 0,
    drift        DOUBLE PRECISION,
    deleted_listing TEXT
);
CREATE INDEX sync_runs_by_cloud ON sync_runs (cloud, started_at);

CREATE TABLE sync_deferrals (
    run_id        TEXT        NOT NULL,
    cloud         TEXT        NOT NULL,
    resource_type TEXT        NOT NULL,
    resource_id   TEXT        NOT NULL,
    action        TEXT        NOT NULL,
    reason        TEXT        NOT NULL,
    detail        TEXT        NOT NULL,
    retry_after   TIMESTAMPTZ,
    deferred_at   TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (run_id, resource_type, resource_id, action)
);
CREATE INDEX sync_deferrals_by_cloud ON sync_deferrals (cloud, deferred_at);

CREATE TABLE sync_locks (
    cloud       TEXT        NOT NULL PRIMARY KEY,
    run_id      TEXT        NOT NULL,
    acquired_at TIMESTAMPTZ NOT NULL
);
