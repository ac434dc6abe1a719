-- Idempotent intake. A player may send its own event_id and resend it on a
-- retry. An event with an occurred_at comes back with the same sort key
-- (tenant_id, video_id, timestamp, event_id), so ReplacingMergeTree collapses
-- the copies. An event without one is stamped with its time of receipt, which
-- differs on the retry: the projector looks such ids up in event_ids and gives
-- a repeat the first record's timestamp (services/projector/event-dedupe.ts).
ALTER TABLE events ADD COLUMN IF NOT EXISTS event_id_from_client Bool DEFAULT false AFTER event_id;

-- Where each player-chosen event id stamped at receipt was first recorded.
-- NOTE: only those rows (ingest stamps an event without occurred_at with
-- exactly its received_at). No other row needs the lookup, so a player that
-- sends occurred_at, as examples/player-client.ts does, adds nothing here,
-- and a repeat re-timed to its first record (timestamp no longer equal to
-- received_at) is not added a second time.
CREATE TABLE IF NOT EXISTS event_ids
(
    tenant_id UUID,
    event_id UUID,
    video_id UUID,
    timestamp DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree
ORDER BY (tenant_id, event_id)
-- Point lookups of random ids cost one granule each: granules of 1024 rows
-- read up to 8 times less than the default 8192 for the few ids of a batch.
SETTINGS index_granularity = 1024;

-- Filled by the insert into events itself, so it can never miss a recorded
-- row. NOTE: that insert is not atomic with this view; after a failed insert
-- an id may be here without its events row, which is why the projector
-- re-times a repeat and inserts it rather than dropping it.
CREATE MATERIALIZED VIEW IF NOT EXISTS event_ids_mv TO event_ids AS
SELECT tenant_id, event_id, video_id, timestamp
FROM events
WHERE event_id_from_client AND timestamp = received_at;
