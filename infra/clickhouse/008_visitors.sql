-- Each visitor's latest snapshot (score, factors, first and last seen, the
-- videos it watched, when its lead was raised), projected from the compacted
-- derived.visitors.v1. `version` is the record's Kafka offset: a visitor's
-- snapshots are all on one partition (keyed <tenant>:<visitor>), in the order
-- the derived-events service wrote them, so the highest offset is the newest
-- state. Reads use FINAL, so a superseded snapshot never shows.
CREATE TABLE IF NOT EXISTS visitors
(
    tenant_id UUID,
    visitor_id String,
    score UInt8,
    score_version UInt16,
    watched_percent Float64,
    focus_time_ratio Float64,
    cta_clicks UInt32,
    rewinds UInt32,
    first_seen DateTime64(3, 'UTC'),
    last_seen DateTime64(3, 'UTC'),
    videos Array(UUID),
    lead_at Nullable(DateTime64(3, 'UTC')),
    version UInt64
)
ENGINE = ReplacingMergeTree(version)
ORDER BY (tenant_id, visitor_id);

-- One visitor's events across videos in time order, filled from events by a
-- materialized view (player signals left out, as in the events API). Replays
-- insert copies with the same sort key; pages drop them at read time
-- (services/api/event-page.ts) and merges collapse them.
CREATE TABLE IF NOT EXISTS visitor_timeline
(
    tenant_id UUID,
    visitor_id String,
    timestamp DateTime64(3, 'UTC'),
    event_id UUID,
    event_name LowCardinality(String),
    video_id UUID,
    session_id String
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(timestamp)
ORDER BY (tenant_id, visitor_id, timestamp, event_id);

CREATE MATERIALIZED VIEW IF NOT EXISTS visitor_timeline_mv TO visitor_timeline AS
SELECT tenant_id, visitor_id, timestamp, event_id, event_name, video_id, session_id
FROM events
WHERE event_name NOT IN ('heartbeat', 'seek');

-- The events recorded before the view existed (a migration runs once).
INSERT INTO visitor_timeline
SELECT tenant_id, visitor_id, timestamp, event_id, event_name, video_id, session_id
FROM events
WHERE event_name NOT IN ('heartbeat', 'seek');
