"""Scale-out on the real broker and a shared ClickHouse server: several partitions, several
workers, partitions moving between them under load.

The reference is the embedded runtime on the same records (one process, one pipeline). Each
cluster's load has its own entities, so clusters never interact, and keying by cluster must
give exactly the reference: the same timeline rows, no duplicate, the same incident log event
by event, whatever the partition count, the assignment and the crashes.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from ingest.canonical import decode
from jobtrail import sample
from jobtrail.config import Settings
from jobtrail.kafka_io import publish_sync
from schemas.events import Event
from tests.integration.kafka_helpers import JOBTRAIL, Worker, consume_all, lag, wait_caught_up

pytestmark = pytest.mark.kafka

CLUSTERS = [f"c{i}" for i in range(6)]
PARTITIONS = 4

_DUMP = """
import json, sys
import clickhouse_connect
client = clickhouse_connect.get_client(dsn=sys.argv[1])
db = sys.argv[2]
def scalar(sql):
    return client.query(sql).result_rows[0][0]
log = client.query(
    f"SELECT incident_id, seq, kind, actor_kind, actor, rule, data FROM {db}.incident_log FINAL "
    "ORDER BY incident_id, seq").result_rows
print(json.dumps({
    "events": scalar(f"SELECT count() FROM {db}.events FINAL"),
    "events_raw": scalar(f"SELECT count() FROM {db}.events"),
    "timeline": scalar(f"SELECT count() FROM {db}.job_timeline FINAL"),
    "duplicate_ids": scalar(f"SELECT count() FROM (SELECT id FROM {db}.events GROUP BY id "
                            "HAVING count() > 1)"),
    "incidents": scalar(f"SELECT count() FROM {db}.incidents FINAL"),
    "log": [list(r) for r in log],
}, default=str))
"""


def dump(dsn: str, database: str) -> dict[str, Any]:
    """Counts and the whole incident log of a store, read in a process of its own (a chDB
    engine is one per process)."""
    out = subprocess.run([sys.executable, "-c", _DUMP, dsn, database], capture_output=True,
                         text=True, timeout=300, check=True)
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def records(per_cluster: int) -> list[Event]:
    lines = [json.dumps(r) for c in CLUSTERS
             for r in sample.synthetic(per_cluster, jobs=8, cluster=c)]
    decoded = decode("\n".join(lines), producer="load", observed_at=datetime.now(UTC))
    assert all(isinstance(e, Event) for e in decoded)
    return [e for e in decoded if isinstance(e, Event)]


def reference(tmp_path: Path, events: list[Event]) -> dict[str, Any]:
    """The same records through the embedded runtime: one process, one pipeline."""
    data = tmp_path / "reference.jsonl"
    data.write_text("\n".join(e.to_json() for e in events) + "\n")
    home = tmp_path / "reference"
    env = {k: v for k, v in os.environ.items()
           if k not in ("JOBTRAIL_KAFKA", "JOBTRAIL_CLICKHOUSE")}
    subprocess.run([*JOBTRAIL, "--home", str(home), "ingest", str(data)], env=env, check=True,
                   capture_output=True, timeout=600)
    return dump(f"chdb://{(home / 'chdb').resolve()}", "jobtrail")


class Group:
    """Workers of one consumer group sharing one ClickHouse database."""

    def __init__(self, bootstrap: str, clickhouse: str, tmp_path: Path) -> None:
        tag = uuid.uuid4().hex[:8]
        self.bootstrap = bootstrap
        self.clickhouse = clickhouse
        self.database = f"so_{tag}"
        self.prefix, self.app_id = f"so{tag}.", f"scale-{tag}"
        self.settings = Settings(kafka=bootstrap, topic_prefix=self.prefix,
                                 partitions=PARTITIONS, wire_batch=50)
        self.tmp_path = tmp_path
        self.workers: list[Worker] = []

    def worker(self, name: str, snapshot_interval_s: float = 1.0) -> Worker:
        w = Worker(self.bootstrap, self.tmp_path / name, self.prefix, self.app_id,
                   batch_size=1000)
        w.env.update({"JOBTRAIL_CLICKHOUSE": self.clickhouse,
                      "JOBTRAIL_DATABASE": self.database,
                      "JOBTRAIL_PARTITIONS": str(PARTITIONS), "JOBTRAIL_WIRE_BATCH": "50",
                      "JOBTRAIL_SESSION_TIMEOUT_S": "6",
                      "JOBTRAIL_SNAPSHOT_INTERVAL_S": str(snapshot_interval_s)})
        w.start()
        self.workers.append(w)
        return w

    def produce(self, events: list[Event], chunks: int = 1, pause_s: float = 0.0) -> None:
        size = -(-len(events) // chunks)
        for i in range(0, len(events), size):
            publish_sync(self.settings, events[i:i + size])
            time.sleep(pause_s)

    def topics(self) -> list[str]:
        return [self.settings.topic("events"), self.settings.topic("dlq")]

    def members(self) -> int:
        import asyncio

        from aiokafka.admin import AIOKafkaAdminClient

        async def run() -> int:
            admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
            await admin.start()
            try:
                responses = await admin.describe_consumer_groups([self.app_id])
                # (error, group, state, protocol type, protocol, members) per group
                return sum(len(group[5]) for r in responses for group in r.groups)
            finally:
                await admin.close()

        return asyncio.run(run())

    def stop(self) -> Iterator[int]:
        for w in self.workers:
            if w.alive():
                yield w.stop()


def _assert_same_as_reference(got: dict[str, Any], want: dict[str, Any], n: int) -> None:
    assert got["duplicate_ids"] == 0
    assert got["events"] == got["events_raw"] == n  # nothing lost, nothing doubled
    assert got["timeline"] == want["timeline"]
    assert got["incidents"] == want["incidents"] > len(CLUSTERS)
    assert got["log"] == want["log"]  # the incident log, event by event


def test_keyed_by_cluster_several_partitions_give_the_one_process_result(
        kafka_broker: str, clickhouse_server: str, tmp_path: Path) -> None:
    events = records(2500)
    group = Group(kafka_broker, clickhouse_server, tmp_path)
    group.produce(events)
    # every cluster's events are on one partition, and the clusters spread over several
    by_cluster: dict[str, set[int]] = {}
    for partition, _, value in consume_all(kafka_broker, [group.settings.topic("events")])[
            group.settings.topic("events")]:
        for line in value.splitlines():
            by_cluster.setdefault(json.loads(line)["cluster"], set()).add(partition)
    assert set(by_cluster) == set(CLUSTERS)
    assert all(len(parts) == 1 for parts in by_cluster.values())
    assert len(set().union(*by_cluster.values())) >= 2
    worker = group.worker("w1")
    try:
        wait_caught_up(kafka_broker, group.app_id, group.topics(), worker)
    finally:
        assert list(group.stop()) == [0]
    _assert_same_as_reference(dump(clickhouse_server, group.database),
                              reference(tmp_path, events), len(events))


def _wait(what: str, check: Any, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_worker_joining_and_one_killed_under_load_lose_and_double_nothing(
        kafka_broker: str, clickhouse_server: str, tmp_path: Path) -> None:
    events = records(4000)
    group = Group(kafka_broker, clickhouse_server, tmp_path)
    group.produce(events[:2000])
    producer = threading.Thread(target=group.produce, args=(events[2000:], 40, 0.4))
    # the first worker saves its state only when it hands partitions over: what it does
    # after that, the second worker must replay from Kafka when it dies
    first = group.worker("a", snapshot_interval_s=600)
    try:
        _wait("the first worker to commit",
              lambda: lag(kafka_broker, group.app_id, group.topics())[0] > 0)
        producer.start()
        second = group.worker("b")  # joins under load: a rebalance hands partitions over
        _wait("both workers in the group", lambda: group.members() == 2)
        _wait("the second worker to take partitions",
              lambda: "partition" in second.log.read_text(errors="replace"))
        time.sleep(2)
        first.stop(signal.SIGKILL)  # dies mid-stream: its partitions move after the timeout
        producer.join(timeout=120)
        assert not producer.is_alive()
        wait_caught_up(kafka_broker, group.app_id, group.topics(), second, timeout_s=300)
    finally:
        if producer.is_alive():
            producer.join(timeout=120)
        list(group.stop())
    took = second.log.read_text(errors="replace")
    # the joiner loaded the states the first worker saved at the handover, and when it died,
    # those states plus what it had committed since, replayed from Kafka
    assert re.search(r"partition \d: state at offset \d+; replayed [1-9]\d* records", took), took
    _assert_same_as_reference(dump(clickhouse_server, group.database),
                              reference(tmp_path, events), len(events))
