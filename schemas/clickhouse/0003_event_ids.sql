-- The idempotency index of canonical events (issue 11): one row per event id, the arrival
-- that stored it first (input stream and offset, e.g. `embedded@1042`,
-- `jobtrail.events/0@88#3`) and a digest of its content. The sink looks ids up here by the
-- primary key: the same arrival again is a replay after a crash (processed again, written
-- idempotently), another arrival with the same digest is a duplicate (dropped), with another
-- digest a conflicting re-send (dead-lettered; the first wins). Written last in a batch.
-- slow mutation: yes, once (the INSERT backfills ids of events stored before this file)

CREATE TABLE IF NOT EXISTS event_ids
(
    id String,
    arrival String,
    digest String,
    time DateTime64(3, 'UTC'),
    cluster LowCardinality(String)
)
ENGINE = ReplacingMergeTree
ORDER BY id
SETTINGS non_replicated_deduplication_window = 1000;

INSERT INTO event_ids (id, arrival, digest, time, cluster)
SELECT id, 'before-event-ids', '', time, cluster FROM events FINAL;
