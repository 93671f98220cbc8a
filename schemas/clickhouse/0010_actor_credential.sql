-- Every incident-log event records the credential its actor acted through (issue 25: who did
-- it is known, not claimed). '' for the log written before, and for the processors.
-- slow mutation: no (a metadata-only column add)
ALTER TABLE incident_log ADD COLUMN IF NOT EXISTS credential String DEFAULT '' AFTER rule;
