-- Issue 12: a failed attempt's loss split by phase, where its failure step came from, and
-- follow-up actions proposed by the processors (with the rule and why) or added by people
-- (kind, priority, tracker; a reason when not done).
-- slow mutation: no (metadata-only column adds)
ALTER TABLE incident_jobs ADD COLUMN IF NOT EXISTS failure_step_source LowCardinality(String) AFTER failure_step;
ALTER TABLE incident_jobs ADD COLUMN IF NOT EXISTS rework_s Float64 AFTER lost_steps;
ALTER TABLE incident_jobs ADD COLUMN IF NOT EXISTS downtime_s Float64 AFTER rework_s;
ALTER TABLE incident_jobs ADD COLUMN IF NOT EXISTS restore_s Float64 AFTER downtime_s;
ALTER TABLE incident_jobs ADD COLUMN IF NOT EXISTS recompute_s Float64 AFTER restore_s;
ALTER TABLE incident_jobs ADD COLUMN IF NOT EXISTS degraded_s Float64 AFTER recompute_s;
ALTER TABLE actions ADD COLUMN IF NOT EXISTS kind LowCardinality(String) AFTER projects;
ALTER TABLE actions ADD COLUMN IF NOT EXISTS priority LowCardinality(String) AFTER kind;
ALTER TABLE actions ADD COLUMN IF NOT EXISTS tracker String AFTER priority;
ALTER TABLE actions ADD COLUMN IF NOT EXISTS reason String AFTER tracker;
ALTER TABLE actions ADD COLUMN IF NOT EXISTS why String AFTER reason;
ALTER TABLE actions ADD COLUMN IF NOT EXISTS rule LowCardinality(String) AFTER why
