"""Live sources: collectors that follow a scheduler or an API and produce canonical events.

A collector sits in front of ingest (DESIGN §9): it reads what the system already exposes,
turns it into event drafts through the adapters in `ingest/`, keeps a restart-safe cursor and
hands the events on: the embedded home or Kafka through the runtime, or (Slurm,
`jobtrail.collect.sinks`) jobtrail's HTTP ingest with a token. Ids are derived from the
source's own content, so a re-read after a crash yields the same ids and the store keeps one
copy. `kubernetes.py` follows an API server (list + watch), `slurm.py` a Slurm controller.
"""
