-- Issue 41: an attempt's GPUs are a fact with a source, and a loss no source can count is
-- unknown, never 0. `gpus_source` says what gave the count (`allocation:tres_alloc_str
-- gres/gpu=16`, `request:--gres=gpu:8 x 2 nodes`, `topology:...`; '' unknown);
-- `requeued_at` is when the scheduler requeued the attempt (an attempt that ended without a
-- requeue holds no GPUs until the next one starts); `loss_unknown` says why an incident's or
-- an attempt's lost GPU-hours are unknown or only a lower bound ('' when known); `unheld_s`
-- is the wait the job held no GPUs (time-to-train delay, not counted).
-- slow mutation: no (metadata-only column adds)
ALTER TABLE job_attempts ADD COLUMN IF NOT EXISTS gpus_source String AFTER gpus;
ALTER TABLE job_attempts ADD COLUMN IF NOT EXISTS requeued_at Nullable(DateTime64(3, 'UTC')) AFTER ended_at;
ALTER TABLE incident_jobs ADD COLUMN IF NOT EXISTS gpus_source String AFTER gpus;
ALTER TABLE incident_jobs ADD COLUMN IF NOT EXISTS unheld_s Float64 AFTER queue_s;
ALTER TABLE incident_jobs ADD COLUMN IF NOT EXISTS loss_unknown String AFTER lost_gpu_hours;
ALTER TABLE incidents ADD COLUMN IF NOT EXISTS loss_unknown String AFTER lost_gpu_hours
