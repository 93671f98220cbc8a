-- Issue 33 (history by policy): when each incident projection row was written, so a TTL can
-- leave rows younger than the retention alone even before their incident's row is
-- projected (the TTLs themselves come from the settings: jobtrail.reports.retention).
-- slow mutation: no (metadata-only column adds)
ALTER TABLE incidents ADD COLUMN IF NOT EXISTS recorded_at DateTime64(3, 'UTC') DEFAULT now64(3);
ALTER TABLE incident_evidence ADD COLUMN IF NOT EXISTS recorded_at DateTime64(3, 'UTC') DEFAULT now64(3);
ALTER TABLE incident_jobs ADD COLUMN IF NOT EXISTS recorded_at DateTime64(3, 'UTC') DEFAULT now64(3);
ALTER TABLE actions ADD COLUMN IF NOT EXISTS recorded_at DateTime64(3, 'UTC') DEFAULT now64(3)
