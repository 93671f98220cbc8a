-- Postmortems: the incident's postmortem status, owner and due date on its projection row,
-- for the incident dashboard and the overdue views (the postmortem itself is folded from
-- the incident log on read: docs/postmortems.md).
-- slow mutation: no (metadata-only column adds)
ALTER TABLE incidents ADD COLUMN IF NOT EXISTS postmortem_status LowCardinality(String) AFTER linked;
ALTER TABLE incidents ADD COLUMN IF NOT EXISTS postmortem_owner String AFTER postmortem_status;
ALTER TABLE incidents ADD COLUMN IF NOT EXISTS postmortem_due String AFTER postmortem_owner
