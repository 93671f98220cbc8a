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
import hashlib
import hmac
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from jobtrail.config import Settings
from processors.incidents.model import Command
from schemas.dead_letters import DeadLetter
from schemas.events import Event

log = logging.getLogger("jobtrail.kafka")


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


async def partition_counts(settings: Settings, names: Sequence[str]) -> dict[str, int]:
    """How many partitions each of our topics has (by short name, e.g. "events")."""
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka)
    await admin.start()
    try:
        described = await admin.describe_topics([settings.topic(n) for n in names])
        by_topic = {d["topic"]: len(d.get("partitions") or ()) for d in described}
        return {name: by_topic.get(settings.topic(name), 0) for name in names}
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
            futures.append(await self._producer.send(
                events_topic, value, key=cluster.encode(),
                headers=sign(self.settings.wire_key, value)))
        for record in records:
            if isinstance(record, DeadLetter):
                futures.append(await self._producer.send(
                    dlq_topic, record.model_dump_json().encode(),
                    key=(record.producer or "unknown").encode()))
        if futures:
            await asyncio.gather(*futures)

    async def publish_command(self, command: Command, cluster: str | None) -> None:
        """A person's incident command on `jobtrail.incident-commands`, keyed like the events
        of the incident's cluster: the same partition number, so it reaches the worker that
        holds the incident (keyed by incident id when the cluster is not known)."""
        key = cluster if cluster is not None else command.incident_id
        await (await self._producer.send(self.settings.topic("incident-commands"),
                                         command.model_dump_json().encode(),
                                         key=key.encode()))

    async def ping(self) -> None:
        """A metadata round trip: raises when the broker does not answer."""
        await asyncio.wait_for(self._producer.client.fetch_all_metadata(), timeout=10)


SIGNATURE = "jobtrail-sig"


def sign(key: bytes, value: bytes) -> list[tuple[str, bytes]]:
    """The headers of a message on jobtrail.events: its signature when a wire key is set."""
    if not key:
        return []
    return [(SIGNATURE, hmac.new(key, value, hashlib.sha256).digest())]


def signed(key: bytes, value: bytes, headers: Sequence[tuple[str, bytes]] | None) -> bool:
    """Whether `value` carries a valid signature by `key` (never without a key)."""
    if not key:
        return False
    given = next((v for k, v in headers or () if k == SIGNATURE), None)
    return given is not None and hmac.compare_digest(
        given, hmac.new(key, value, hashlib.sha256).digest())


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


@dataclass(frozen=True)
class Record:
    """One Kafka message as the runtimes see it (no Faust or aiokafka types past the edge)."""

    topic: str
    partition: int
    offset: int
    value: bytes
    timestamp: float = 0.0
    signed: bool = False
    """Signed by a producer holding the wire key: validated and redacted already."""

    @property
    def where(self) -> str:
        return f"{self.topic}/{self.partition}@{self.offset}"


class PartitionReader:
    """Reads a partition back for a shard's catch-up, and the group's committed offsets. Called
    from a worker's store thread: each call runs its own short-lived event loop and clients."""

    def __init__(self, bootstrap: str, group: str, timeout_s: float = 120.0) -> None:
        self.bootstrap = bootstrap
        self.group = group
        self.timeout_s = timeout_s

    def bounds(self, topic: str, partition: int) -> tuple[int | None, int, int]:
        """(the group's committed offset — the next record it reads — or None, the earliest
        offset still in the log, the end offset)."""

        async def run() -> tuple[int | None, int, int]:
            tp = TopicPartition(topic, partition)
            admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
            consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap,
                                        enable_auto_commit=False)
            await admin.start()
            await consumer.start()
            try:
                earliest = (await consumer.beginning_offsets([tp]))[tp]
                end = (await consumer.end_offsets([tp]))[tp]
                offsets = await admin.list_consumer_group_offsets(self.group, partitions=[tp])
                meta = offsets.get(tp)
                committed = meta.offset if meta is not None and meta.offset >= 0 else None
                return committed, earliest, end
            finally:
                await consumer.stop()
                await admin.close()

        return asyncio.run(asyncio.wait_for(run(), self.timeout_s))

    def committed(self, topic: str) -> dict[int, int]:
        """The group's committed offset of every partition of `topic` it committed (one
        request, so a rebalance of many partitions does not wait on one per partition)."""

        async def run() -> dict[int, int]:
            admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
            await admin.start()
            try:
                offsets = await admin.list_consumer_group_offsets(self.group)
                return {tp.partition: meta.offset for tp, meta in offsets.items()
                        if tp.topic == topic and meta.offset > 0}
            finally:
                await admin.close()

        return asyncio.run(asyncio.wait_for(run(), self.timeout_s))

    def read(self, topic: str, partition: int, start: int, end: int) -> list[Record]:
        """Every record with start <= offset < end (bounded by the timeout)."""
        if start >= end:
            return []

        async def run() -> list[Record]:
            tp = TopicPartition(topic, partition)
            consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap,
                                        enable_auto_commit=False, max_poll_records=5000)
            await consumer.start()
            try:
                consumer.assign([tp])
                consumer.seek(tp, start)
                out: list[Record] = []
                while not out or out[-1].offset < end - 1:
                    batch = await consumer.getmany(tp, timeout_ms=1000)
                    for message in batch.get(tp, []):
                        if message.offset >= end:
                            return out
                        out.append(Record(topic, partition, message.offset,
                                          message.value or b"", message.timestamp / 1000))
                    if await consumer.position(tp) >= end:
                        break
                return out
            finally:
                await consumer.stop()

        return asyncio.run(asyncio.wait_for(run(), self.timeout_s))


async def until_sent(what: str, send: Callable[[], Awaitable[None]],
                     budget_s: float = 90.0) -> None:
    """`send()` again while the broker is away (a restart, a leader moving): a retriable
    Kafka error waits and retries, doubling from 0.5 s to 5 s, for `budget_s`; past it, or
    on any other error, the error is raised (the worker then exits without acking and its
    replacement replays the batch). A retry may send again what the broker already took:
    the topics are at-least-once, and their events carry their ids."""
    from aiokafka.errors import KafkaError

    loop = asyncio.get_running_loop()
    deadline, delay = loop.time() + budget_s, 0.5
    while True:
        try:
            await send()
            return
        except KafkaError as exc:
            if not getattr(exc, "retriable", False) or loop.time() + delay > deadline:
                raise
            log.warning("%s: the broker is unavailable (%s: %s), retrying in %.1f s", what,
                        type(exc).__name__, exc, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
