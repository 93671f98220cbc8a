-- Issue 41: an incident carries the cluster it happened in. Entity names are unique only
-- within a cluster (two clusters can both have a node-001), so the incident rows, their
-- listing and the API say which; rows written before hold '' (`jobtrail replay` fills it
-- from the log).
-- slow mutation: no (a metadata-only column add)
ALTER TABLE incidents ADD COLUMN IF NOT EXISTS cluster LowCardinality(String) DEFAULT '' AFTER key
