-- Player events, one row per event_id. Replays insert identical rows and
-- ReplacingMergeTree collapses them; exact reads use FINAL.
CREATE TABLE IF NOT EXISTS events
(
    tenant_id UUID,
    video_id UUID,
    timestamp DateTime64(3, 'UTC'),
    event_id UUID,
    event_name LowCardinality(String),
    session_id String,
    visitor_id String,
    current_time Float64,
    duration Float64,
    watched_percentage Float64,
    play_ms Int64 DEFAULT 0,
    focus_ms Int64 DEFAULT 0,
    seek_from Nullable(Float64),
    seek_to Nullable(Float64),
    utm_source Nullable(String),
    utm_campaign Nullable(String),
    ctwa_clid Nullable(String),
    external_lead_id Nullable(String),
    source LowCardinality(String) DEFAULT 'player',
    conversion_value Nullable(Float64),
    conversion_currency Nullable(String),
    received_at DateTime64(3, 'UTC'),
    inserted_at DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(timestamp)
ORDER BY (tenant_id, video_id, timestamp, event_id);
