-- An event's identity is (cloud, event_id): the same id in two clouds is two events, so one cloud's
-- writer can neither shadow another cloud's events nor learn which ids it holds.
ALTER TABLE events DROP CONSTRAINT events_pkey, ADD PRIMARY KEY (cloud, event_id);
