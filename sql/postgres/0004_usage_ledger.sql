-- The usage ledger: checkpoint-delta postings, the checkpoint per entity, and usage per day.
-- Amounts are exact: NUMERIC(38,6) holds integer micro-units of the meter's unit exactly.

-- One row per entity (cloud, project, meter): how far it has been posted.
CREATE TABLE usage_checkpoints (
    cloud         TEXT          NOT NULL,
    project_id    TEXT          NOT NULL,
    meter         TEXT          NOT NULL,
    total         NUMERIC(38,6) NOT NULL DEFAULT 0,  -- usage through clamp, as posted (= sum of postings)
    clamp         TIMESTAMPTZ,                       -- NULL: never posted
    aged_boundary TIMESTAMPTZ,                       -- min(window start, clamp) when last posted
    aged_before   NUMERIC(38,6) NOT NULL DEFAULT 0,  -- the part of total dated before aged_boundary
    cycle_id      TEXT,
    updated_at    TIMESTAMPTZ,
    PRIMARY KEY (cloud, project_id, meter)
) WITH (fillfactor = 70);  -- room on each page: every cycle rewrites every row, as HOT updates

-- Signed deltas. The natural key (entity, clamp, account) makes a re-run of a cycle post nothing.
CREATE TABLE ledger_postings (
    cloud        TEXT          NOT NULL,
    project_id   TEXT          NOT NULL,
    meter        TEXT          NOT NULL,
    clamp        TIMESTAMPTZ   NOT NULL,
    account      TEXT          NOT NULL CHECK (account IN ('usage', 'aged_out')),
    amount       NUMERIC(38,6) NOT NULL CHECK (amount <> 0),
    unit         TEXT          NOT NULL,
    window_start TIMESTAMPTZ   NOT NULL,
    cycle_id     TEXT          NOT NULL,
    posted_at    TIMESTAMPTZ   NOT NULL,
    PRIMARY KEY (cloud, project_id, meter, clamp, account)
);
-- No other index: every cycle appends a row per entity with usage, and each index is paid for on
-- every one of them. The key serves entity lookups and verification's sums.

-- Usage per UTC day for analysts; a day is recomputed whole (delete, insert).
CREATE TABLE usage_daily (
    cloud       TEXT          NOT NULL,
    project_id  TEXT          NOT NULL,
    meter       TEXT          NOT NULL,
    day         DATE          NOT NULL,
    quantity    NUMERIC(38,6) NOT NULL,
    unit        TEXT          NOT NULL,
    computed_at TIMESTAMPTZ   NOT NULL,
    PRIMARY KEY (cloud, project_id, meter, day)
);
CREATE INDEX usage_daily_by_day ON usage_daily (day);
