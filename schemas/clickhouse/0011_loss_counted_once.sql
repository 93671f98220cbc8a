-- Issue 27: GPU time lost is counted once. Beside the loss (rework + downtime while the job's
-- GPUs were held + restore), a failed attempt reports the wait it spent in the queue and the
-- job's wall-clock setback; neither is counted. `recompute_s` is no longer written (re-doing
-- the thrown-away steps is not a second loss); `jobtrail replay` recomputes every stored
-- loss through the impact_assessed v1 upcaster.
-- slow mutation: no (metadata-only column adds)
ALTER TABLE incident_jobs ADD COLUMN IF NOT EXISTS queue_s Float64 AFTER restore_s;
ALTER TABLE incident_jobs ADD COLUMN IF NOT EXISTS setback_s Float64 AFTER queue_s
