"""The Faust worker against the real broker: exact counts, duplicates, dead letters, SIGKILL."""

from __future__ import annotations

import json
import signal
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ingest.canonical import decode
from jobtrail.config import Settings
from jobtrail.learn import sample
from jobtrail.runtime.kafka_io import publish_sync
from schemas.dead_letters import DeadLetter
from tests.integration.kafka_helpers import (
    Worker,
    lag,
    produce_raw,
    run_to_end,
    stats,
    wait_caught_up,
)

pytestmark = pytest.mark.kafka


def _names() -> tuple[str, str]:
    tag = uuid.uuid4().hex[:8]
    return f"t{tag}.", f"worker-{tag}"


def test_worker_stores_exactly_once_and_dead_letters_bad_input(kafka_broker: str,
                                                               tmp_path: Path) -> None:
    prefix, app_id = _names()
    settings = Settings(kafka=kafka_broker, topic_prefix=prefix)
    n = 5000
    records = decode("\n".join(json.dumps(r) for r in sample.synthetic(n)),
                     producer="test", observed_at=datetime.now(UTC))
    # ingest-side rejects travel on the DLQ topic
    invalid = decode('{"type": "job.step", "time": "soon"}\n{"type": "nope"}\nnot json\n',
                     producer="test", observed_at=datetime.now(UTC))
    assert all(isinstance(r, DeadLetter) for r in invalid)
    publish_sync(settings, [*records, *invalid])
    # redelivery: the first 700 events again, and records that bypassed ingest
    publish_sync(settings, records[:700])
    produce_raw(kafka_broker, settings.topic("events"),
                [b"\x00\x01 garbage", b'{"type": "job.step", "cluster": "c"}'])
    worker = Worker(kafka_broker, tmp_path / "home", prefix, app_id)
    worker.start()
    try:
        wait_caught_up(kafka_broker, app_id, [settings.topic("events"), settings.topic("dlq")],
                       worker)
        _, end = lag(kafka_broker, app_id, [settings.topic("events")])
    finally:
        assert worker.stop() == 0
    counts = stats(tmp_path / "home")
    # the worker keeps its state under its home, never in the directory it was started in
    assert not (Path.cwd() / f"{app_id}-data").exists()
    # a clean stop saved its state in the store at the last offset (the next owner's start)
    assert counts["worker_state"] == {
        f"{app_id} {prefix}events/0": {f"{prefix}events/0": end - 1}}
    assert counts["duplicate_event_ids"] == 0
    assert counts["raw"]["events"] == counts["final"]["events"] == n
    assert counts["final"]["job_timeline"] == n
    # 3 rejected at ingest + 2 rejected by the worker's own decode
    assert counts["final"]["dead_letters"] == 5
    assert counts["raw"]["dead_letters"] == 5
    assert counts["final"]["job_attempts"] == 50


def test_sigkill_mid_stream_then_restart_loses_and_duplicates_nothing(
        kafka_broker: str, tmp_path: Path) -> None:
    prefix, app_id = _names()
    settings = Settings(kafka=kafka_broker, topic_prefix=prefix)
    n = 60_000
    records = decode("\n".join(json.dumps(r) for r in sample.synthetic(n)),
                     producer="test", observed_at=datetime.now(UTC))
    publish_sync(settings, records)
    topics = [settings.topic("events")]
    home = tmp_path / "home"
    worker = Worker(kafka_broker, home, prefix, app_id, batch_size=1000)
    worker.start()
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        assert worker.alive(), worker.log.read_text()[-3000:]
        done, end = lag(kafka_broker, app_id, topics)
        if 0 < done < end:
            break
        time.sleep(0.2)
    done_at_kill, end = lag(kafka_broker, app_id, topics)
    worker.stop(signal.SIGKILL)
    assert 0 < done_at_kill < end, "kill must land mid-stream"
    restarted = Worker(kafka_broker, home, prefix, app_id, batch_size=1000)
    restarted.start()
    try:
        wait_caught_up(kafka_broker, app_id, topics, restarted)
    finally:
        restarted.stop()
    counts = stats(home)
    assert counts["duplicate_event_ids"] == 0
    assert counts["raw"]["events"] == counts["final"]["events"] == n
    assert counts["final"]["job_timeline"] == n
    assert counts["final"]["job_attempts"] == 50


def test_signed_messages_are_trusted_and_anything_else_is_checked(
        kafka_broker: str, clickhouse_server: str, tmp_path: Path) -> None:
    """With the wire key, what ingest signed skips the worker's validation; an unsigned or
    forged message on the topic is validated and redacted like any foreign input."""
    import clickhouse_connect

    from jobtrail.runtime.kafka_io import sign

    prefix, app_id = _names()
    key = uuid.uuid4().hex.encode()
    database = f"w_{uuid.uuid4().hex[:8]}"
    settings = Settings(kafka=kafka_broker, topic_prefix=prefix, wire_key=key)
    records = decode("\n".join(json.dumps(r) for r in sample.synthetic(300)),
                     producer="test", observed_at=datetime.now(UTC))
    publish_sync(settings, records)  # signed by the publisher
    secret = "ghp_" + "Z9y8X7w6V5u4T3s2R1q0P9o8N7m6L5k4J3i2"
    unsigned = json.dumps({"id": "unsigned-1", "type": "operator.note", "cluster": "c",
                           "time": "2026-11-30T08:00:00Z",
                           "message": f"rotated {secret}"}).encode()
    forged = json.dumps({"id": "forged-1", "type": "job.step", "cluster": "c",
                         "time": "2026-11-30T08:00:00Z", "project": "p", "job_id": "j",
                         "attempt": 1, "attributes": {"step": "many"}}).encode()
    produce_raw(kafka_broker, settings.topic("events"), [unsigned], key=b"c")
    import asyncio

    from aiokafka import AIOKafkaProducer

    async def send_forged() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=kafka_broker, acks="all")
        await producer.start()
        try:
            headers = sign(b"not the key", forged)
            await (await producer.send(settings.topic("events"), forged, key=b"c",
                                       headers=headers))
        finally:
            await producer.stop()

    asyncio.run(send_forged())
    worker = Worker(kafka_broker, tmp_path / "home", prefix, app_id)
    worker.env.update({"JOBTRAIL_WIRE_KEY": key.decode(), "JOBTRAIL_CLICKHOUSE": clickhouse_server,
                       "JOBTRAIL_DATABASE": database})
    run_to_end(worker, kafka_broker, app_id, [settings.topic("events"), settings.topic("dlq")])
    client = clickhouse_connect.get_client(dsn=clickhouse_server, database=database)
    assert client.query("SELECT count() FROM events FINAL").result_rows[0][0] == 301
    note = client.query("SELECT message FROM events WHERE id = 'unsigned-1'").result_rows
    assert note and secret not in note[0][0] and "rotated" in note[0][0]
    letters = client.query("SELECT field, event_ref FROM dead_letters FINAL").result_rows
    assert [f for f, _ in letters] == ["attributes.step"]
