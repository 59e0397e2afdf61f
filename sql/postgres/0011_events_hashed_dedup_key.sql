-- An event's identity stays (cloud, event_id), exactly, but the index that enforces it stores a
-- 4-byte hash of the key instead of the key's text: an exclusion constraint over a hash index.
-- On a hash match Postgres compares the full key value, so two different keys whose hashes
-- collide are both stored; a second copy of the same key is refused as before (ON CONFLICT DO
-- NOTHING handles an exclusion constraint like a unique one). The btree primary key on the text
-- took about 57-89 bytes per event and, with random uuid ids, a random page per insert; the hash
-- index takes about 38, so more of it stays in shared_buffers as the log grows.
-- The key text is length-prefixed ("<bytes of cloud>:<cloud><event_id>") so that it is injective:
-- ("a b", "c") and ("a", "b c") give different texts. Lookups by (cloud, event_id) must use the
-- same expression to reach the index (the store's ingest queries do).
ALTER TABLE events DROP CONSTRAINT events_pkey;
ALTER TABLE events ADD CONSTRAINT events_dedup_key
    EXCLUDE USING hash ((octet_length(cloud)::text || ':' || cloud || event_id) WITH =);
