-- Monthly statements: per cloud, project and meter, the usage dated in a UTC month, written once the
-- month is closed (docs/ledger.md, "Statements"). A re-statement is a new version beside the old ones,
-- never an update: (cloud, project_id, meter, month, version) is the key, and each version keeps the
-- amount it replaces and the difference.
CREATE TABLE usage_statements (
    cloud             TEXT          NOT NULL,
    project_id        TEXT          NOT NULL,
    meter             TEXT          NOT NULL,
    month             TEXT          NOT NULL,  -- YYYY-MM (UTC)
    version           INTEGER       NOT NULL CHECK (version >= 1),
    quantity          NUMERIC(38,6) NOT NULL,  -- usage dated in the month, in the meter's unit
    unit              TEXT          NOT NULL,
    previous_quantity NUMERIC(38,6),           -- the version before's quantity (NULL: version 1)
    difference        NUMERIC(38,6) NOT NULL,  -- quantity - previous_quantity (version 1: quantity)
    stated_at         TIMESTAMPTZ   NOT NULL,
    posted_through    TIMESTAMPTZ   NOT NULL,  -- the earliest clamp of the cloud's ledger when stated
    watermark         BIGINT        NOT NULL,  -- the projection watermark the usage was read at
    PRIMARY KEY (cloud, month, project_id, meter, version)
);

-- One row per cloud and month once it is stated: when first, when last re-stated, when last checked.
CREATE TABLE statement_months (
    cloud       TEXT        NOT NULL,
    month       TEXT        NOT NULL,  -- YYYY-MM (UTC)
    stated_at   TIMESTAMPTZ NOT NULL,  -- the first statement
    restated_at TIMESTAMPTZ,           -- the latest re-statement (NULL: never re-stated)
    checked_at  TIMESTAMPTZ NOT NULL,  -- the latest run that found it closed and compared it
    versions    INTEGER     NOT NULL,  -- statement lines written for the month, every version counted
    PRIMARY KEY (cloud, month)
);
