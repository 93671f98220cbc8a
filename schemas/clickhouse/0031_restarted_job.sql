-- Issue 41: a failed job resubmitted under a new job id (a later job of the project restored
-- the checkpoint it saved) is restarted by that job: `restarted_job` names it, and
-- `restarted_attempt` is that job's attempt. '' when the job restarted itself (a requeue) or
-- has not restarted.
-- slow mutation: no (a metadata-only column add)
ALTER TABLE incident_jobs ADD COLUMN IF NOT EXISTS restarted_job String DEFAULT '' AFTER restarted_attempt
