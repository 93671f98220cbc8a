"""Producing canonical events and dead letters to Kafka (the ingest edge in cluster mode).

Events are keyed by cluster (DESIGN §4) so one cluster's events stay in order on one
partition; dead letters are keyed by producer. `publish` returns only after the broker
acknowledged every record (acks=all), which is what lets ingest answer "accepted".

A message on `jobtrail.events` holds one canonical event or several as JSON lines (same
cluster, in order). Batching on the wire is what makes the Faust worker fast: its cost is
per message, not per byte (measured in bench/e2e.py). Consumers accept both shapes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from jobtrail.config import Settings
from processors.incidents.model import Command
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
        for cluster, value in batch_by_cluster(
                [r for r in records if isinstance(r, Event)], self.settings.wire_batch):
            futures.append(await self._producer.send(events_topic, value, key=cluster.encode()))
        for record in records:
            if isinstance(record, DeadLetter):
                futures.append(await self._producer.send(
                    dlq_topic, record.model_dump_json().encode(),
                    key=(record.producer or "unknown").encode()))
        if futures:
            await asyncio.gather(*futures)

    async def publish_command(self, command: Command) -> None:
        """A person's incident command on `jobtrail.incident-commands`, keyed by incident."""
        await (await self._producer.send(self.settings.topic("incident-commands"),
                                         command.model_dump_json().encode(),
                                         key=command.incident_id.encode()))

    async def ping(self) -> None:
        """A metadata round trip: raises when the broker does not answer."""
        await asyncio.wait_for(self._producer.client.fetch_all_metadata(), timeout=10)


def batch_by_cluster(events: Sequence[Event], max_events: int,
                     max_bytes: int = 512 * 1024) -> list[tuple[str, bytes]]:
    """Group events into JSON-lines messages per cluster, keeping each cluster's order."""
    open_batches: dict[str, list[bytes]] = {}
    sizes: dict[str, int] = {}
    out: list[tuple[str, bytes]] = []
    for event in events:
        line = event.to_json().encode()
        batch = open_batches.setdefault(event.cluster, [])
        if batch and (len(batch) >= max_events or sizes[event.cluster] + len(line) > max_bytes):
            out.append((event.cluster, b"\n".join(batch)))
            batch.clear()
            sizes[event.cluster] = 0
        batch.append(line)
        sizes[event.cluster] = sizes.get(event.cluster, 0) + len(line) + 1
    out.extend((cluster, b"\n".join(b)) for cluster, b in open_batches.items() if b)
    return out


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
