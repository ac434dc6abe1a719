-- Videos as configured, projected from config.videos.v1 for analytics joins.
CREATE TABLE IF NOT EXISTS videos
(
    tenant_id UUID,
    id UUID,
    title String,
    duration_sec UInt32,
    created_at DateTime64(3, 'UTC'),
    deleted UInt8 DEFAULT 0,
    version UInt64
)
ENGINE = ReplacingMergeTree(version)
ORDER BY (tenant_id, id);
