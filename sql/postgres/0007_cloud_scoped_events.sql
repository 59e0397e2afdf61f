-- An event's identity is (cloud, event_id): the same id in two clouds is two events, so one cloud's
-- writer can neither shadow another cloud's events nor learn which ids it holds.
ALTER TABLE events DROP CONSTRAINT events_pkey, ADD PRIMARY KEY (cloud, event_id);

-- A size is stored in the form the meters read: a whole-number float in a size field (2.0, which
-- older releases stored as sent) becomes the integer (2). Only the size object's own fields are
-- rewritten (the meters read nothing deeper); the content hash of a rewritten event is left as it
-- was, so a later copy of it resent with 2.0 is answered duplicate with conflict: true once.
-- The projection is refolded from the first rewritten event on, so the intervals carry the new form.
WITH fixed AS (
    UPDATE events SET payload = jsonb_set(payload, '{size}', (
        SELECT jsonb_object_agg(f.key, CASE
            WHEN jsonb_typeof(f.value) = 'number' AND f.value::text ~ '[.eE]'
                 AND (f.value::text)::numeric = trunc((f.value::text)::numeric)
                 AND abs((f.value::text)::numeric) < 9223372036854775808
            THEN to_jsonb(trunc((f.value::text)::numeric)) ELSE f.value END)
        FROM jsonb_each(payload -> 'size') AS f))
    WHERE jsonb_typeof(payload -> 'size') = 'object' AND EXISTS (
        SELECT 1 FROM jsonb_each(payload -> 'size') AS f
        WHERE jsonb_typeof(f.value) = 'number' AND f.value::text ~ '[.eE]'
          AND (f.value::text)::numeric = trunc((f.value::text)::numeric)
          AND abs((f.value::text)::numeric) < 9223372036854775808)
    RETURNING seq
)
UPDATE projection_state SET watermark = least(watermark, (SELECT min(seq) - 1 FROM fixed))
WHERE name = 'resources' AND EXISTS (SELECT 1 FROM fixed);

-- The dead letter has limits. One duplicate_conflict row per (cloud, event_id, content): conflict_key
-- is the content hash of the conflicting copy (NULL for every other reason, and NULLs never collide
-- in a unique index), repeats counts the copies received, last_received_at the latest one.
ALTER TABLE rejected_events ADD COLUMN conflict_key TEXT;
ALTER TABLE rejected_events ADD COLUMN repeats BIGINT DEFAULT 1;
ALTER TABLE rejected_events ADD COLUMN last_received_at TIMESTAMPTZ;
CREATE UNIQUE INDEX rejected_events_conflicts ON rejected_events (cloud, event_id, conflict_key);
