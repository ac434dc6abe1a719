-- The delivery log: one row per state change of a delivery (an attempt and
-- its outcome, or "pending" when queued by hand). A delivery's status is its
-- latest row. Replays insert identical rows, which collapse.
CREATE TABLE IF NOT EXISTS webhook_attempts
(
    tenant_id UUID,
    delivery_id UUID,
    recorded_at DateTime64(3, 'UTC'),
    attempt UInt16,
    state LowCardinality(String),
    destination_id UUID,
    event_id UUID,
    event_name LowCardinality(String),
    started_at Nullable(DateTime64(3, 'UTC')),
    duration_ms Nullable(UInt32),
    status_code Nullable(UInt16),
    error_class Nullable(String),
    next_attempt_at Nullable(DateTime64(3, 'UTC')),
    delivery_created_at DateTime64(3, 'UTC'),
    body String CODEC(ZSTD(3))
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(delivery_created_at)
ORDER BY (tenant_id, delivery_id, recorded_at, attempt, state);
