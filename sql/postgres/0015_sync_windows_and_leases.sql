-- Reconciliation runs record how far nova's deleted listing covered deletes (the next run asks
-- from there, so a run that could not read nova never moves the window) and how many resources
-- stuck in transition they booked; a run's lock records when it was last renewed (the lease runs
-- from there, so a long run keeps its lock and a crashed one loses it soon).
ALTER TABLE sync_runs ADD COLUMN deleted_window_end TIMESTAMPTZ;
ALTER TABLE sync_runs ADD COLUMN stuck_transition INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sync_locks ADD COLUMN renewed_at TIMESTAMPTZ;
-- Runs from before: a succeeded run listed every type and its deleted listing answered.
UPDATE sync_runs SET deleted_window_end = poll_time WHERE status = 'succeeded' AND deleted_listing = 'available';
