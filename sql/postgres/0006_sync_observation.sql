-- Reconciliation runs record the scheduled tick (the run key's instant) apart from the poll time
-- (the instant the platform's listing began), how many deletes the platform did not confirm, how
-- many listed items were skipped as unreadable, and whether the run was the cloud's first load.
ALTER TABLE sync_runs ADD COLUMN tick TIMESTAMPTZ;
ALTER TABLE sync_runs ADD COLUMN unconfirmed INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sync_runs ADD COLUMN skipped INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sync_runs ADD COLUMN first_load BOOLEAN NOT NULL DEFAULT false;
