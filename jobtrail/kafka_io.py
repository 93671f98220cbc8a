"""Producing canonical events and dead letters to Kafka (the ingest edge in cluster mode).

Events are keyed by cluster (DESIGN §4) so one cluster's events stay in order on one
partition; dead letters are keyed by producer. `publish` returns only after the broker
acknowledged every record (acks=all), which is what lets ingest answer "accepted".
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from jobtrail.config import Settings
from schemas.dead_letters import DeadLetter
from schemas.events import Event


async def ensure_topics(settings: Settings) -> None:
    """Create our topics if missing (idempotent); partitions from settings."""
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        wanted = [settings.topic(n) for n in ("raw", "events", "dlq", "incident-commands",
                                              "incident-events", "notifications")]
        missing = [NewTopic(t, settings.partitions, 1) for t in wanted if t not in existing]
        if missing:
            await admin.create_topics(missing)
    finally:
        await admin.close()


class KafkaPublisher:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._producer = AIOKafkaProducer(bootstrap_servers=settings.kafka, acks="all",
                                          linger_ms=5, max_batch_size=1_048_576,
                                          compression_type=None)

    async def start(self) -> None:
        await self._producer.start()

    async def stop(self) -> None:
        await self._producer.stop()

    async def publish(self, records: Sequence[Event | DeadLetter]) -> None:
        events_topic = self.settings.topic("events")
        dlq_topic = self.settings.topic("dlq")
        futures = []
        for record in records:
            if isinstance(record, Event):
                futures.append(await self._producer.send(
                    events_topic, record.to_json().encode(), key=record.cluster.encode()))
            else:
                futures.append(await self._producer.send(
                    dlq_topic, record.model_dump_json().encode(),
                    key=(record.producer or "unknown").encode()))
        if futures:
            await asyncio.gather(*futures)


def publish_sync(settings: Settings, records: Sequence[Event | DeadLetter]) -> None:
    async def run() -> None:
        await ensure_topics(settings)
        publisher = KafkaPublisher(settings)
        await publisher.start()
        try:
            await publisher.publish(records)
        finally:
            await publisher.stop()

    asyncio.run(run())
