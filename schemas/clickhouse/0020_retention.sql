-- Issue 33 (history by policy): when each incident projection row was written, so a TTL can
-- leave rows younger than the retention alone even before their incident's row is
-- projected (MATERIALIZED: out of `SELECT *`, so reads and replays are unchanged); and
-- `incident_retention`, the few columns of each incident that decide whether
-- the policy still keeps it, written beside `incidents`. The incident tables' TTLs
-- (jobtrail.reports.retention, from the settings) ask it which incidents are kept: a TTL
-- may not read its own table (the engine then refuses to start), so `incidents` cannot.
-- It keeps one small row per incident after the incident is gone (a tombstone, no TTL).
-- slow mutation: yes, once (the INSERT backfills incident_retention from incidents)
ALTER TABLE incidents ADD COLUMN IF NOT EXISTS recorded_at DateTime64(3, 'UTC') MATERIALIZED now64(3);
ALTER TABLE incident_evidence ADD COLUMN IF NOT EXISTS recorded_at DateTime64(3, 'UTC') MATERIALIZED now64(3);
ALTER TABLE incident_jobs ADD COLUMN IF NOT EXISTS recorded_at DateTime64(3, 'UTC') MATERIALIZED now64(3);
ALTER TABLE actions ADD COLUMN IF NOT EXISTS recorded_at DateTime64(3, 'UTC') MATERIALIZED now64(3);

CREATE TABLE IF NOT EXISTS incident_retention
(
    incident_id String,
    version UInt32,
    status LowCardinality(String),
    closed_at Nullable(DateTime64(3, 'UTC')),
    postmortem_status LowCardinality(String)
)
ENGINE = ReplacingMergeTree(version)
ORDER BY incident_id;

INSERT INTO incident_retention (incident_id, version, status, closed_at, postmortem_status)
SELECT incident_id, version, status, closed_at, postmortem_status FROM incidents FINAL
