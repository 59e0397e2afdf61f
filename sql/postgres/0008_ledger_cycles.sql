-- What each posting cycle did, and every entity it skipped or posted without some intervals.
-- The poster writes them; the ledger audit, the API's /metrics and the TallyLedgerEntitiesSkipped
-- alert read them (they run in other processes than the poster).
CREATE TABLE ledger_cycles (
    cycle_id    TEXT        NOT NULL PRIMARY KEY,
    now_at      TIMESTAMPTZ NOT NULL,  -- the cycle's now
    clamp       TIMESTAMPTZ NOT NULL,
    entities    INTEGER     NOT NULL,
    posted      INTEGER     NOT NULL,
    skipped     INTEGER     NOT NULL,  -- entities not posted
    excluded    INTEGER     NOT NULL,  -- entities posted without the intervals the meters cannot read
    recorded_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX ledger_cycles_by_time ON ledger_cycles (recorded_at);

CREATE TABLE ledger_skips (
    cycle_id           TEXT    NOT NULL,
    cloud              TEXT    NOT NULL,
    project_id         TEXT    NOT NULL,
    meter              TEXT    NOT NULL,
    reason             TEXT    NOT NULL,  -- bad_size, unknown_meter, non_monotonic, no_checkpoint, error
    detail             TEXT    NOT NULL,
    excluded_intervals INTEGER NOT NULL DEFAULT 0,  -- > 0: the entity was posted without them
    PRIMARY KEY (cycle_id, cloud, project_id, meter, reason)
);
