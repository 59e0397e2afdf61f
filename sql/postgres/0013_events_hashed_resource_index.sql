-- A resource's history is found through a 64-bit hash of its key, not the key's text. The old
-- index held (cloud, resource_type, resource_id, occurred_at) per event: about 112 bytes an event
-- with uuid resource ids, and a random page of it touched by every insert. The hash takes 8 bytes,
-- and a resource's events share one value, which the btree stores once with a list of row ids
-- (deduplication), so the index shrinks further the more events a resource has.
-- Readers match the hash AND the key columns themselves, so two keys whose hashes collide are
-- both read and told apart: answers stay exact. They must use this exact expression to reach the
-- index (store/postgres/resource_key.py writes it). It is length-prefixed, like the dedup key, so
-- that it is injective: ("a", "b:c") and ("a:b", "c") give different texts.
-- The history is read unordered and sorted afterwards (a resource has few events), so occurred_at
-- is no longer in the index.
-- Built before the old one is dropped: the build blocks writes to events but not reads; only the
-- drop and rename, at the end, take the table's exclusive lock, for an instant.
SET LOCAL maintenance_work_mem = '256MB';
CREATE INDEX events_by_resource_hash ON events (hashtextextended(
    octet_length(cloud)::text || ':' || cloud || octet_length(resource_type)::text || ':' || resource_type
    || resource_id, 0));
DROP INDEX events_by_resource;
ALTER INDEX events_by_resource_hash RENAME TO events_by_resource;
