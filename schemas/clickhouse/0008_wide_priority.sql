-- Slurm priorities are unsigned 32-bit (InitPrio=4294901759 is common): the Int32 column
-- could not hold them, and a batch holding one failed every insert. Int64 holds every value
-- the attribute model accepts.
-- slow mutation: yes on a large job_attempts (a column type change rewrites the column)
ALTER TABLE job_attempts MODIFY COLUMN priority Nullable(Int64)
