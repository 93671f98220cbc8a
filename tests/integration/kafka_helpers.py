"""Helpers for tests against the real broker: produce, wait for a group to catch up, stats."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

JOBTRAIL = [sys.executable, "-m", "jobtrail.cli"]


def produce_raw(bootstrap: str, topic: str, values: list[bytes], key: bytes = b"c") -> None:
    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
        await producer.start()
        try:
            futures = [await producer.send(topic, v, key=key) for v in values]
            await asyncio.gather(*futures)
        finally:
            await producer.stop()

    asyncio.run(run())


async def _partitions(admin: AIOKafkaAdminClient, topics: list[str]) -> list[TopicPartition]:
    """Every partition of `topics` (a consumer's cached metadata may not know them yet)."""
    described = await admin.describe_topics(topics)
    return [TopicPartition(d["topic"], p["partition"]) for d in described
            for p in d.get("partitions") or []]


def lag(bootstrap: str, group: str, topics: list[str]) -> tuple[int, int]:
    """(committed, end) summed over the topics' partitions."""

    async def run() -> tuple[int, int]:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
        await admin.start()
        await consumer.start()
        try:
            parts = await _partitions(admin, topics)
            ends = await consumer.end_offsets(parts)
            try:
                committed = await admin.list_consumer_group_offsets(group)
            except KafkaError:  # coordinator not elected yet, or group not created yet
                return 0, sum(ends.values())
            done = sum(committed[tp].offset for tp in parts if tp in committed
                       and committed[tp].offset >= 0)
            return done, sum(ends.values())
        finally:
            await consumer.stop()
            await admin.close()

    return asyncio.run(run())


class Worker:
    """`jobtrail worker` in a subprocess with its own chDB home."""

    def __init__(self, bootstrap: str, home: Path, prefix: str, app_id: str,
                 batch_size: int = 2000) -> None:
        self.home = home
        self.env = {**os.environ, "JOBTRAIL_KAFKA": bootstrap, "JOBTRAIL_TOPIC_PREFIX": prefix,
                    "JOBTRAIL_APP_ID": app_id, "JOBTRAIL_BATCH_SIZE": str(batch_size),
                    "JOBTRAIL_BATCH_SECONDS": "0.3"}
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = home.parent / f"{app_id}-{home.name}.log"

    def start(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        out = self.log.open("ab")
        self.proc = subprocess.Popen([*JOBTRAIL, "--home", str(self.home), "worker"],
                                     env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)

    def stop(self, sig: int = signal.SIGTERM) -> int:
        assert self.proc is not None
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(timeout=30)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def wait_caught_up(bootstrap: str, group: str, topics: list[str], worker: Worker,
                   timeout_s: float = 240) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert worker.alive(), f"worker died: {worker.log.read_text()[-3000:]}"
        done, end = lag(bootstrap, group, topics)
        if end and done >= end:
            return
        time.sleep(0.5)
    raise AssertionError(f"worker did not catch up in {timeout_s}s: "
                         f"{lag(bootstrap, group, topics)}")


def run_to_end(worker: Worker, bootstrap: str, group: str, topics: list[str],
               timeout_s: float = 240) -> int:
    """Start the worker, wait until its group committed the end of `topics`, stop it;
    returns its exit code."""
    worker.start()
    try:
        wait_caught_up(bootstrap, group, topics, worker, timeout_s=timeout_s)
    finally:
        code = worker.stop()
    return code


def stats(home: Path) -> dict[str, Any]:
    out = subprocess.run([*JOBTRAIL, "--home", str(home), "stats"], capture_output=True,
                         text=True, timeout=120, check=True)
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def consume_all(bootstrap: str, topics: list[str]) -> dict[str, list[tuple[int, int, bytes]]]:
    """Every message on `topics` now, as (partition, offset, value) per topic."""

    async def run() -> dict[str, list[tuple[int, int, bytes]]]:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        await consumer.start()
        try:
            parts = await _partitions(admin, topics)
            await admin.close()
            consumer.assign(parts)
            await consumer.seek_to_beginning(*parts)
            ends = await consumer.end_offsets(parts)
            out: dict[str, list[tuple[int, int, bytes]]] = {t: [] for t in topics}
            deadline = time.monotonic() + 60
            while True:
                positions = [await consumer.position(tp) for tp in parts]
                if all(p >= ends[tp] for p, tp in zip(positions, parts, strict=True)):
                    break
                assert time.monotonic() < deadline, "could not read the topics to their end"
                batch = await consumer.getmany(timeout_ms=500)
                for tp, messages in batch.items():
                    out[tp.topic].extend((m.partition, m.offset, m.value or b"")
                                         for m in messages)
            return out
        finally:
            await consumer.stop()

    return asyncio.run(run())


_DUMP = """
import json, sys
import clickhouse_connect
client = clickhouse_connect.get_client(dsn=sys.argv[1])
names = [r[0] for r in client.query(
    "SELECT name FROM system.tables WHERE database = 'jobtrail'").result_rows]
for name in names:
    rows = client.query(f"SELECT * FROM jobtrail.{name}").result_rows
    print(json.dumps([name, rows], default=str))
"""


def dump_tables(home: Path) -> str:
    """Every row of every table in a home's embedded engine (another process's chDB)."""
    out = subprocess.run([sys.executable, "-c", _DUMP, f"chdb://{(home / 'chdb').resolve()}"],
                         capture_output=True, text=True, timeout=300, check=True)
    return out.stdout
