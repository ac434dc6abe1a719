-- The score's inputs keyed by visitor, filled from events by a materialized
-- view. NOTE: factors are summed at read time over this table with FINAL,
-- not kept in an AggregatingMergeTree: sums of play time and counts of
-- clicks are not idempotent, and a replayed batch would inflate them.
CREATE TABLE IF NOT EXISTS visitor_events
(
    visitor_id String,
    tenant_id UUID,
    event_id UUID,
    timestamp DateTime64(3, 'UTC'),
    video_id UUID,
    event_name LowCardinality(String),
    watched_percentage Float64,
    play_ms Int64,
    focus_ms Int64,
    is_rewind UInt8
)
ENGINE = ReplacingMergeTree
ORDER BY (visitor_id, tenant_id, event_id)
-- A score reads one visitor's rows: a few hundred to a few thousand per part.
-- Granules of 1024 rows read up to 8 times less than the default 8192 for
-- each (docs/performance.md: at 10M events, 5,120 rows read per score
-- instead of 32,768). NOTE: a
-- database created before this setting keeps its 8192-row granules (the
-- setting is fixed when a table is made); its scores are the same, each
-- reads more rows. A read model rebuilt from Kafka into a new database gets it.
SETTINGS index_granularity = 1024;

CREATE MATERIALIZED VIEW IF NOT EXISTS visitor_events_mv TO visitor_events AS
SELECT
    visitor_id,
    tenant_id,
    event_id,
    timestamp,
    video_id,
    event_name,
    watched_percentage,
    play_ms,
    focus_ms,
    toUInt8(event_name = 'seek' AND seek_to < seek_from) AS is_rewind
FROM events;
