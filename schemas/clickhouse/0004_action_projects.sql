-- Follow-up actions carry the projects of whoever added them (issue 11: a shared incident
-- shows each project only its own notes and actions).
-- slow mutation: no (a metadata-only column add)
ALTER TABLE actions ADD COLUMN IF NOT EXISTS projects Array(String) AFTER due;
