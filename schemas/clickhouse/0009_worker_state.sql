-- The stream workers' processor state per input partition (a shard), saved every few seconds
-- and when a partition is handed over: the worker that owns the partition next loads the
-- newest row and replays the rest of the partition from Kafka. Read only by workers (no
-- Grafana grant). `version` grows with the positions, so a late save from a worker that has
-- lost the partition never hides a newer one.
-- slow mutation: no
CREATE TABLE IF NOT EXISTS worker_state
(
    app_id String,
    shard String,
    version UInt64,
    saved_at DateTime64(3, 'UTC'),
    owner String,
    positions Map(String, Int64),
    body String
)
ENGINE = ReplacingMergeTree(version)
ORDER BY (app_id, shard)
