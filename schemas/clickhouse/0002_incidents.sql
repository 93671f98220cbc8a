-- Incidents (DESIGN §6): the append-only log and its current-state projections.
-- slow mutation: no
-- incident_log is the projection of jobtrail.incident-events; every other table here is
-- rebuilt from it by `jobtrail replay`. Rows carry the incident's seq as their version.

CREATE TABLE IF NOT EXISTS incident_log
(
    id String,
    incident_id String,
    seq UInt32,
    kind LowCardinality(String),
    time DateTime64(3, 'UTC'),
    actor_kind LowCardinality(String),
    actor String,
    rule LowCardinality(String),
    data String,
    command_id String,
    recorded_at DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree
ORDER BY (incident_id, id)
SETTINGS non_replicated_deduplication_window = 1000;

CREATE TABLE IF NOT EXISTS incidents
(
    incident_id String,
    version UInt32,
    key String,
    status LowCardinality(String),
    title String,
    class LowCardinality(String),
    entity String,
    rule LowCardinality(String),
    cause_class LowCardinality(String),
    cause_entity String,
    cause_event String,
    confidence Float32,
    explanation String,
    severity LowCardinality(String),
    severity_why String,
    owner LowCardinality(String),
    owner_rule LowCardinality(String),
    owner_why String,
    commander String,
    opened_at Nullable(DateTime64(3, 'UTC')),
    acknowledged_at Nullable(DateTime64(3, 'UTC')),
    mitigated_at Nullable(DateTime64(3, 'UTC')),
    resolved_at Nullable(DateTime64(3, 'UTC')),
    closed_at Nullable(DateTime64(3, 'UTC')),
    first_signal_at Nullable(DateTime64(3, 'UTC')),
    last_signal_at Nullable(DateTime64(3, 'UTC')),
    signals UInt32,
    impacted_jobs UInt32,
    impacted_gpus UInt32,
    lost_gpu_hours Float64,
    lost_steps Int64,
    recovery LowCardinality(String),
    projects Array(String),
    flags Array(String),
    linked Array(String)
)
ENGINE = ReplacingMergeTree(version)
ORDER BY incident_id;

CREATE TABLE IF NOT EXISTS incident_evidence
(
    incident_id String,
    event_id String,
    time DateTime64(3, 'UTC'),
    type LowCardinality(String),
    source LowCardinality(String),
    entity String,
    why String,
    role LowCardinality(String),
    project LowCardinality(String),
    job_id String,
    attempt UInt32
)
ENGINE = ReplacingMergeTree
ORDER BY (incident_id, event_id);

CREATE TABLE IF NOT EXISTS incident_jobs
(
    incident_id String,
    project LowCardinality(String),
    job_id String,
    attempt UInt32,
    role LowCardinality(String),
    gpus UInt32,
    failed_at Nullable(DateTime64(3, 'UTC')),
    failure_step Nullable(Int64),
    last_checkpoint_step Nullable(Int64),
    last_checkpoint_at Nullable(DateTime64(3, 'UTC')),
    restarted_attempt Nullable(UInt32),
    restarted_at Nullable(DateTime64(3, 'UTC')),
    restored_step Nullable(Int64),
    resumed_at Nullable(DateTime64(3, 'UTC')),
    verified_at Nullable(DateTime64(3, 'UTC')),
    lost_gpu_hours Float64,
    lost_steps Int64,
    recovery LowCardinality(String),
    duplicate_run Bool,
    version UInt32
)
ENGINE = ReplacingMergeTree(version)
ORDER BY (incident_id, project, job_id, attempt);

CREATE TABLE IF NOT EXISTS actions
(
    incident_id String,
    action_id String,
    title String,
    owner String,
    status LowCardinality(String),
    due String,
    version UInt32
)
ENGINE = ReplacingMergeTree(version)
ORDER BY (incident_id, action_id);
