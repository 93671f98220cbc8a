"""A load of several clusters for the scale-out tests and the fault drills: the records,
their reference result (the embedded runtime, one process), workers of one group sharing one
ClickHouse database, and a dump of what a store holds to compare with the reference."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ingest.canonical import decode
from jobtrail.config import Settings
from jobtrail.learn import sample
from jobtrail.runtime.kafka_io import publish_sync
from schemas.events import Event
from tests.integration.kafka_helpers import JOBTRAIL, Worker, lag

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

    def worker(self, name: str, snapshot_interval_s: float = 1.0,
               **env: str) -> Worker:
        w = Worker(self.bootstrap, self.tmp_path / name, self.prefix, self.app_id,
                   batch_size=1000)
        w.env.update({"JOBTRAIL_CLICKHOUSE": self.clickhouse,
                      "JOBTRAIL_DATABASE": self.database,
                      "JOBTRAIL_PARTITIONS": str(PARTITIONS), "JOBTRAIL_WIRE_BATCH": "50",
                      "JOBTRAIL_SESSION_TIMEOUT_S": "6",
                      "JOBTRAIL_SNAPSHOT_INTERVAL_S": str(snapshot_interval_s), **env})
        w.start()
        self.workers.append(w)
        return w

    def produce(self, events: list[Event], chunks: int = 1, pause_s: float = 0.0,
                retry_s: float = 0.0) -> None:
        """Produce in `chunks`, `pause_s` apart; with `retry_s`, a chunk the broker did not
        acknowledge is sent again (a producer riding out an outage: records may repeat)."""
        size = -(-len(events) // chunks)
        for i in range(0, len(events), size):
            deadline = time.monotonic() + retry_s
            while True:
                try:
                    publish_sync(self.settings, events[i:i + size])
                    break
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(1)
            time.sleep(pause_s)

    def committed(self) -> int:
        """Offsets the group committed, over every partition of its topics."""
        return lag(self.bootstrap, self.app_id, self.topics())[0]

    def committed_past_saved_state(self, worker: Worker) -> bool:
        """Whether `worker` has committed records of a partition past the state it saved for
        it: what a successor must replay from Kafka when that worker dies now."""
        import asyncio

        import clickhouse_connect
        from aiokafka.admin import AIOKafkaAdminClient
        from aiokafka.structs import TopicPartition

        assert worker.proc is not None
        client = clickhouse_connect.get_client(dsn=self.clickhouse)
        try:
            rows = client.query(
                f"SELECT argMax(positions, version), argMax(owner, version) "
                f"FROM {self.database}.worker_state WHERE app_id = {{app:String}} "
                "GROUP BY shard", parameters={"app": self.app_id}).result_rows
        finally:
            client.close()
        saved = {stream: int(offset) for positions, owner in rows
                 if owner.endswith(f":{worker.proc.pid}")
                 for stream, offset in dict(positions).items()}

        async def run() -> dict[str, int]:
            admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
            await admin.start()
            try:
                offsets = await admin.list_consumer_group_offsets(self.app_id)
            finally:
                await admin.close()
            return {f"{tp.topic}/{tp.partition}": meta.offset for tp, meta in offsets.items()
                    if isinstance(tp, TopicPartition)}

        committed = asyncio.run(run())
        # a saved position is the last offset processed; a committed offset is the next to read
        return any(committed.get(stream, -1) - 1 > offset for stream, offset in saved.items())

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


def assert_same_as_reference(got: dict[str, Any], want: dict[str, Any], n: int) -> None:
    assert got["duplicate_ids"] == 0
    assert got["events"] == got["events_raw"] == n  # nothing lost, nothing doubled
    assert got["timeline"] == want["timeline"]
    assert got["incidents"] == want["incidents"] > len(CLUSTERS)
    assert got["log"] == want["log"]  # the incident log, event by event


def wait(what: str, check: Callable[[], Any], timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")




def figures(drill: str, n: int, got: dict[str, Any], want: dict[str, Any]) -> dict[str, Any]:
    """What a drill did to the data, printed for the record (pytest -s) and returned."""
    out = {"drill": drill, "events_in": n, "stored": got["events"],
           "duplicated": got["events_raw"] - got["events"] + got["duplicate_ids"],
           "lost": n - got["events"], "timeline_rows": got["timeline"],
           "incidents": got["incidents"], "incident_log_equal": got["log"] == want["log"]}
    print("DRILL " + json.dumps(out), flush=True)
    return out
