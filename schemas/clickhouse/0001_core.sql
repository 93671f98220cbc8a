-- jobtrail core tables. Applied by jobtrail.store.migrate(); every statement is idempotent.
-- slow mutation: no
-- The same DDL runs on chDB and on a ClickHouse server; Replicated/Distributed variants for
-- clusters are a deploy-time choice (deploy/README.md).

-- Every canonical event. ReplacingMergeTree collapses a redelivered id (same sorting key);
-- the sink also filters ids it already stored, so raw counts stay exact.
CREATE TABLE IF NOT EXISTS events
(
    id String,
    schema_version UInt16,
    type LowCardinality(String),
    source LowCardinality(String),
    time DateTime64(3, 'UTC'),
    observed_at DateTime64(3, 'UTC'),
    severity LowCardinality(String),
    project LowCardinality(String),
    cluster LowCardinality(String),
    job_id String,
    attempt UInt32,
    scope LowCardinality(String),
    entity String,
    node String,
    message String,
    attributes String,
    producer LowCardinality(String),
    INDEX idx_event_id id TYPE bloom_filter(0.01) GRANULARITY 4,
    INDEX idx_event_entity entity TYPE bloom_filter(0.01) GRANULARITY 4
)
ENGINE = ReplacingMergeTree
PARTITION BY toYYYYMM(time)
ORDER BY (cluster, time, id)
SETTINGS non_replicated_deduplication_window = 1000;

-- One row per (job, attempt, event), including infrastructure events attributed to the job.
CREATE TABLE IF NOT EXISTS job_timeline
(
    project LowCardinality(String),
    job_id String,
    attempt UInt32,
    time DateTime64(3, 'UTC'),
    event_id String,
    cluster LowCardinality(String),
    source LowCardinality(String),
    type LowCardinality(String),
    severity LowCardinality(String),
    relation LowCardinality(String),
    entity String,
    link_path String,
    scope LowCardinality(String),
    node String,
    message String,
    attributes String
)
ENGINE = ReplacingMergeTree
ORDER BY (project, job_id, time, event_id, attempt)
SETTINGS non_replicated_deduplication_window = 1000;

-- Membership and lifecycle of each attempt; `version` grows with every event folded in, so
-- FINAL (or argMax on version) reads the current state.
CREATE TABLE IF NOT EXISTS job_attempts
(
    project LowCardinality(String),
    cluster LowCardinality(String),
    job_id String,
    attempt UInt32,
    state LowCardinality(String),
    outcome LowCardinality(String),
    user String,
    queue String,
    priority Nullable(Int32),
    submitted_at Nullable(DateTime64(3, 'UTC')),
    started_at Nullable(DateTime64(3, 'UTC')),
    ended_at Nullable(DateTime64(3, 'UTC')),
    queue_wait_s Nullable(Float64),
    pending_reasons Array(String),
    pending_times Array(DateTime64(3, 'UTC')),
    exit_code Nullable(Int32),
    end_reason String,
    nodes Array(String),
    gpus UInt32,
    gpu_ids Array(String),
    ranks Map(String, String),
    image String,
    code_version String,
    data_version String,
    config_hash String,
    mounts Array(String),
    checkpoint_dir String,
    source_event_ids Array(String),
    version UInt64
)
ENGINE = ReplacingMergeTree(version)
ORDER BY (project, job_id, attempt);

-- Inputs we could not accept, with the stage, the reason and the (redacted) payload.
CREATE TABLE IF NOT EXISTS dead_letters
(
    id String,
    received_at DateTime64(3, 'UTC'),
    stage LowCardinality(String),
    reason String,
    field String,
    producer LowCardinality(String),
    event_ref String,
    payload String
)
ENGINE = ReplacingMergeTree
ORDER BY (stage, id)
SETTINGS non_replicated_deduplication_window = 1000;
