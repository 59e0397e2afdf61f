-- The standing audit of the ledger against nova's own usage (os-simple-tenant-usage): one row per
-- audit of a cloud over a window, with its verdict and figures, so /metrics (read by every API
-- process) and the alert see the latest audit of each cloud whichever process ran it.
CREATE TABLE usage_audits (
    audit_id                TEXT        NOT NULL PRIMARY KEY,
    cloud                   TEXT        NOT NULL,
    audited_at              TIMESTAMPTZ NOT NULL,  -- the audit's now (its window is cut to it)
    recorded_at             TIMESTAMPTZ NOT NULL,  -- when it was kept (wall clock): the latest is the last kept
    window_start            TIMESTAMPTZ NOT NULL,
    window_end              TIMESTAMPTZ NOT NULL,
    status                  TEXT        NOT NULL CHECK (status IN ('passed', 'failed', 'error')),
    projects                BIGINT      NOT NULL,  -- (project, meter) pairs compared
    projects_failing        BIGINT      NOT NULL,  -- pairs whose unexplained difference exceeds the tolerance
    servers_nova            BIGINT      NOT NULL,
    servers_tally           BIGINT      NOT NULL,
    unexplained_instance_hours NUMERIC(38,6) NOT NULL,
    unexplained_vcpu_hours  NUMERIC(38,6) NOT NULL,
    differences             TEXT        NOT NULL,  -- JSON: differences counted per kind
    api_calls               BIGINT      NOT NULL,  -- pages of nova's usage API read
    seconds                 DOUBLE PRECISION NOT NULL,
    error                   TEXT                   -- why an audit could not be made (status error)
);
CREATE INDEX usage_audits_cloud_recorded ON usage_audits (cloud, recorded_at);
