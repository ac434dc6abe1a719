-- Security events: the destination host only, never a URL path or a secret.
CREATE TABLE IF NOT EXISTS security_events
(
    tenant_id UUID,
    occurred_at DateTime64(3, 'UTC'),
    id UUID,
    kind LowCardinality(String),
    endpoint_id UUID,
    host String,
    event_id Nullable(String),
    event_name Nullable(String)
)
ENGINE = ReplacingMergeTree
ORDER BY (tenant_id, occurred_at, id);
