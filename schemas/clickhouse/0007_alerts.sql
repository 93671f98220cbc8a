-- Alerts: subscriptions and silences (versioned config: the highest version of an id is
-- current, `deleted` keeps the history), the notification outbox (one row per decision,
-- the latest revision wins) and every delivery attempt (docs/subscriptions.md).
-- Retention: notifications and deliveries 90 days; subscriptions and silences kept.
-- slow mutation: no (new tables)
CREATE TABLE IF NOT EXISTS subscriptions
(
    id String,
    version UInt32,
    owner String,
    projects Array(String),
    spec String,
    deleted UInt8 DEFAULT 0,
    updated_at DateTime64(3, 'UTC'),
    updated_by String
)
ENGINE = ReplacingMergeTree(version)
ORDER BY id;

CREATE TABLE IF NOT EXISTS silences
(
    id String,
    version UInt32,
    projects Array(String),
    spec String,
    deleted UInt8 DEFAULT 0,
    updated_at DateTime64(3, 'UTC'),
    updated_by String
)
ENGINE = ReplacingMergeTree(version)
ORDER BY id;

CREATE TABLE IF NOT EXISTS notifications
(
    id String,
    subscription_id String,
    incident_id String,
    transition LowCardinality(String),
    key String,
    seq UInt32,
    time DateTime64(3, 'UTC'),
    not_before DateTime64(3, 'UTC'),
    status LowCardinality(String),
    reason String,
    digest_key String,
    folded Array(String),
    severity LowCardinality(String),
    labels String,
    decided_at DateTime64(3, 'UTC'),
    revision UInt64
)
ENGINE = ReplacingMergeTree(revision)
ORDER BY (subscription_id, id)
TTL toDateTime(decided_at) + INTERVAL 90 DAY;

CREATE TABLE IF NOT EXISTS deliveries
(
    notification_id String,
    subscription_id String,
    attempt UInt16,
    at DateTime64(3, 'UTC'),
    status LowCardinality(String),
    code UInt16,
    latency_ms UInt32,
    error String,
    next_at Nullable(DateTime64(3, 'UTC')),
    channel LowCardinality(String),
    message_ids Array(String)
)
ENGINE = ReplacingMergeTree
ORDER BY (notification_id, attempt)
TTL toDateTime(at) + INTERVAL 90 DAY
