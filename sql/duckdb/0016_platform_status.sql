-- The platform status (active, shutoff, suspended, shelved_offloaded, error, available, …) is part
-- of the history: the fold carries each event's payload.status into the state and the intervals,
-- and a status change starts a new interval, so meters can choose which statuses they bill.
ALTER TABLE folded_events ADD COLUMN status TEXT;
ALTER TABLE current_resources ADD COLUMN platform_status TEXT;
ALTER TABLE resource_intervals ADD COLUMN platform_status TEXT;
-- Folds made before knew no status: the projection is folded again from the log on the next
-- refresh (the same work as a rebuild; the ledger's next cycle posts any difference as deltas).
DELETE FROM folded_events;
DELETE FROM resource_intervals;
DELETE FROM current_resources;
UPDATE projection_state SET watermark = 0 WHERE name = 'resources';
