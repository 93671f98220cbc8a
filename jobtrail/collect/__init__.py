"""Live sources: collectors that follow a running system and produce canonical events.

A collector sits in front of ingest (DESIGN §9): it reads what the system already exposes,
turns it into event drafts through the adapters in `ingest/`, keeps a restart-safe cursor and
hands the events to a sink (`jobtrail.collect.sinks`): the embedded home or Kafka through the
runtime, or jobtrail's HTTP ingest with a token. Ids are derived from the source's own
content, so a re-read after a crash yields the same ids and the store keeps one copy.
"""
