"""Scale-out: 1, 2 and 4 `jobtrail worker` processes on a 4-partition topic, one shared store.

One real broker, one ClickHouse server (the dev server: chDB behind the HTTP interface, one
process), the same backlog for every run: `--events` canonical events of 8 clusters whose
names spread evenly over the 4 partitions (events are keyed by cluster), signed with a wire
key as ingest signs them. Each run has a fresh consumer group and database; it is timed from
the group's first commit to its last. Printed per run: events/s in total and per worker, the
speed-up over one worker (the ratio to compare across machines), and the CPU seconds the
workers, the store and the broker spent, which say where it stops scaling.

    python -m bench.scaling --events 200000
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import tempfile
import time
from pathlib import Path
from typing import Any

PARTITIONS = 4


def clusters(n: int = 8) -> list[str]:
    """`n` cluster names, as many on each partition (Kafka's default partitioner)."""
    from aiokafka.partitioner import DefaultPartitioner

    partitioner = DefaultPartitioner()
    per = n // PARTITIONS
    taken: dict[int, list[str]] = {p: [] for p in range(PARTITIONS)}
    i = 0
    while any(len(v) < per for v in taken.values()):
        name = f"site-{i}"
        part = partitioner(name.encode(), list(range(PARTITIONS)), list(range(PARTITIONS)))
        if len(taken[part]) < per:
            taken[part].append(name)
        i += 1
    return sorted(c for v in taken.values() for c in v)


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process and its reaped children so far."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    return sum(int(f) for f in fields[11:15]) / ticks


def _run(bootstrap: str, dsn: str, work: Path, n_workers: int, key: str, prefix: str,
         total_messages: int, store_pid: int, broker_pid: int) -> dict[str, Any]:
    from tests.integration.kafka_helpers import Worker, lag

    tag = f"w{n_workers}"
    app_id = f"scaling-{tag}-{secrets.token_hex(3)}"
    workers = []
    for i in range(n_workers):
        w = Worker(bootstrap, work / tag / f"worker-{i}", prefix, app_id, batch_size=5000)
        w.env.update({"JOBTRAIL_CLICKHOUSE": dsn, "JOBTRAIL_DATABASE": f"scale_{tag}",
                      "JOBTRAIL_PARTITIONS": str(PARTITIONS), "JOBTRAIL_WIRE_KEY": key,
                      "JOBTRAIL_WIRE_BATCH": "500", "JOBTRAIL_SESSION_TIMEOUT_S": "10"})
        workers.append(w)
    for w in workers:
        w.start()
    topic = f"{prefix}events"
    first: tuple[float, int] | None = None
    deadline = time.monotonic() + 1800

    def cpu() -> tuple[float, float, float]:
        return (sum(_cpu_s(w.proc.pid) for w in workers if w.proc is not None),
                _cpu_s(store_pid), _cpu_s(broker_pid))

    try:
        while time.monotonic() < deadline:
            done, end = lag(bootstrap, app_id, [topic])
            now = time.monotonic()
            if done and first is None:
                first, at_first = (now, done), cpu()  # CPU from here on: the timed window
            if end and done >= end:
                break
            dead = [w for w in workers if not w.alive()]
            if dead:
                raise RuntimeError(dead[0].log.read_text()[-3000:])
            time.sleep(0.2)
        else:
            raise RuntimeError("the workers did not finish in time")
        assert first is not None
        used = [b - a for a, b in zip(at_first, cpu(), strict=True)]
    finally:
        for w in workers:
            w.stop()
    seconds = max(now - first[0], 1e-9)
    events = (done - first[1]) * 500
    return {"workers": n_workers, "events": events, "seconds": round(seconds, 1),
            "events_per_s": round(events / seconds),
            "per_worker": round(events / seconds / n_workers),
            "cpu_s": {"workers": round(used[0], 1), "store": round(used[1], 1),
                      "broker": round(used[2], 1)},
            "total_messages": total_messages}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--workers", default="1,2,4")
    opts = parser.parse_args()

    from datetime import UTC, datetime

    from ingest.canonical import decode
    from jobtrail.config import Settings
    from jobtrail.dev import clickhouse, kafka
    from jobtrail.learn import sample
    from jobtrail.runtime.kafka_io import batch_by_cluster, ensure_topics
    from schemas.events import Event

    names = clusters()
    per_cluster = opts.events // len(names)
    lines = [json.dumps(r) for c in names
             for r in sample.synthetic(per_cluster, jobs=20, cluster=c)]
    events = [e for e in decode("\n".join(lines), producer="bench",
                                observed_at=datetime.now(UTC)) if isinstance(e, Event)]
    messages = batch_by_cluster(events, 500)
    work = Path(tempfile.mkdtemp(prefix="jobtrail-scaling-"))
    broker = kafka.start(work / "kafka")
    store = clickhouse.start(work / "clickhouse")
    key = secrets.token_hex(16)
    prefix = "scaling."
    runs = []
    try:
        import asyncio

        settings = Settings(kafka=broker.bootstrap, topic_prefix=prefix, partitions=PARTITIONS)
        asyncio.run(ensure_topics(settings))
        from aiokafka import AIOKafkaProducer

        from jobtrail.runtime.kafka_io import sign

        async def produce() -> None:
            producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, acks="all",
                                        linger_ms=20, max_batch_size=1_048_576)
            await producer.start()
            try:
                futures = [await producer.send(f"{prefix}events", value, key=cluster.encode(),
                                               headers=sign(key.encode(), value))
                           for cluster, value in messages]
                await asyncio.gather(*futures)
            finally:
                await producer.stop()

        asyncio.run(produce())
        from jobtrail.store import Store

        for n in (int(x) for x in opts.workers.split(",")):
            Store.connect(store.dsn, f"scale_w{n}").migrate()  # not part of any timed run
        print(f"{len(events)} events of {len(names)} clusters in {len(messages)} messages on "
              f"{PARTITIONS} partitions", flush=True)
        for n in (int(x) for x in opts.workers.split(",")):
            result = _run(broker.bootstrap, store.dsn, work, n, key, prefix, len(messages),
                          store.pid, broker.pid)
            runs.append(result)
            print(json.dumps(result), flush=True)
    finally:
        clickhouse.stop(store)
        kafka.stop(broker)
    one = runs[0]["events_per_s"]
    print(f"\n{'workers':>7} {'events/s':>9} {'per worker':>10} {'speed-up':>8} "
          f"{'CPU s: workers':>14} {'store':>6} {'broker':>6}")
    for r in runs:
        print(f"{r['workers']:>7} {r['events_per_s']:>9} {r['per_worker']:>10} "
              f"{r['events_per_s'] / one:>8.2f} {r['cpu_s']['workers']:>14} "
              f"{r['cpu_s']['store']:>6} {r['cpu_s']['broker']:>6}")
    print(json.dumps({"cores": os.cpu_count(), "partitions": PARTITIONS,
                      "speedup": {r["workers"]: round(r["events_per_s"] / one, 2)
                                  for r in runs}}))


if __name__ == "__main__":
    main()
