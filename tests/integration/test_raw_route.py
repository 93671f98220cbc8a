"""`jobtrail.raw` against the real broker: sources' own payloads, keyed by adapter, become
stored events and dead letters; the same payload sent twice stores its events once."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from ingest.adapters import registry
from ingest.raw import decode_raw
from jobtrail.config import Settings
from jobtrail.runtime.kafka_io import ensure_topics
from schemas.events import Event
from tests.integration.kafka_helpers import Worker, run_to_end, stats

pytestmark = pytest.mark.kafka
FIXTURES = Path(__file__).parent.parent / "ingest" / "fixtures"

Message = tuple[bytes, bytes, list[tuple[str, bytes]]]


def _produce(bootstrap: str, topic: str, messages: list[Message]) -> None:
    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
        await producer.start()
        try:
            for key, value, headers in messages:
                await (await producer.send(topic, value, key=key or None, headers=headers))
        finally:
            await producer.stop()

    asyncio.run(run())


def test_raw_topic_runs_the_adapters(kafka_broker: str, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    prefix, app_id = f"r{tag}.", f"raw-{tag}"
    settings = Settings(kafka=kafka_broker, topic_prefix=prefix)
    asyncio.run(ensure_topics(settings))
    webhook = (FIXTURES / "alertmanager" / "ib_port_down_firing_and_resolved.json").read_bytes()
    kernel = (FIXTURES / "node-log" / "kernel_infra.log").read_bytes()
    cloudevent = (FIXTURES / "cloudevents" / "structured.json").read_bytes()
    messages: list[Message] = [
        (b"alertmanager", webhook, [("jobtrail-cluster", b"cluster-a")]),
        (b"", kernel, [("jobtrail-adapter", b"node-log"), ("jobtrail-node", b"node-041")]),
        (b"", cloudevent, [("content-type", b"application/cloudevents+json")]),
        (b"no-such-adapter", b"whatever", []),
        (b"alertmanager", webhook, [("jobtrail-cluster", b"cluster-a")]),  # sent twice
    ]
    # what the adapters make of the same messages, computed here
    now = datetime.now(UTC)
    expected: set[str] = set()
    dead = 0
    for i, (key, value, headers) in enumerate(messages):
        out = decode_raw(value, key.decode(), {k: v.decode() for k, v in headers}, now,
                         f"m{i}", registry())
        expected |= {r.id for r in out if isinstance(r, Event)}
        dead += sum(1 for r in out if not isinstance(r, Event))
    assert len(expected) >= 15 and dead == 6
    _produce(kafka_broker, settings.topic("raw"), messages)
    worker = Worker(kafka_broker, tmp_path / "home", prefix, app_id)
    run_to_end(worker, kafka_broker, app_id, [settings.topic(t) for t in ("raw", "events", "dlq")])
    counts = stats(tmp_path / "home")
    assert counts["duplicate_event_ids"] == 0
    assert counts["final"]["events"] == len(expected)
    assert counts["final"]["dead_letters"] == dead
