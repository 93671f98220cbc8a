"""End-to-end throughput: Kafka -> jobtrail worker -> ClickHouse, against raw baselines.

In one run, on one real broker and the same topic contents:
- baseline: a plain aiokafka consumer that json-decodes each record and inserts it into the
  same `events` table (no validation, no dedup, no processors);
- worker: `jobtrail worker` (Faust, full decode/dedup/attempts/timeline/incident path), with
  the messages signed by the wire key as jobtrail ingest signs them (`--unsigned`: every
  record validated and redacted again, as for a producer without the key);
- raw chDB: the same canonical rows inserted into `events` through the embedded engine
  (JSONEachRow, batches of the worker's size): the embedded runtime's baseline;
- embedded: the embedded runner draining the same records from its file log into chDB.
Each runs in its own process (chDB allows one engine per process). Printed: events/s of each
and the ratios worker / baseline and embedded / raw chDB, the figures to compare across
machines; and the CPU time per event of each path (user + system, all threads of its
process) with the same ratios, which other work on a shared machine moves much less.

    python -m bench.e2e --events 100000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent


def _records(n: int, wire_batch: int) -> list[bytes]:
    """Message values exactly as ingest produces them (JSON lines, `wire_batch` per message)."""
    from ingest.canonical import decode
    from jobtrail.learn import sample
    from jobtrail.runtime.kafka_io import batch_by_cluster
    from schemas.events import Event

    text = "\n".join(json.dumps(r) for r in sample.synthetic(n))
    decoded = decode(text, producer="bench", observed_at=datetime.now(UTC))
    events = [d for d in decoded if isinstance(d, Event)]
    return [value for _, value in batch_by_cluster(events, wire_batch)]


def _produce(bootstrap: str, topic: str, values: list[bytes], key: bytes = b"") -> None:
    from aiokafka import AIOKafkaProducer

    from jobtrail.runtime.kafka_io import sign

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=20,
                                    max_batch_size=1_048_576)
        await producer.start()
        try:
            batch = []
            for value in values:
                batch.append(await producer.send(topic, value, key=b"cluster-a",
                                                 headers=sign(key, value)))
                if len(batch) >= 10_000:
                    await asyncio.gather(*batch)
                    batch = []
            await asyncio.gather(*batch)
        finally:
            await producer.stop()

    asyncio.run(run())


def baseline(bootstrap: str, topic: str, home: Path, n: int) -> dict[str, Any]:
    """Consume with aiokafka, insert rows straight into `events`; commit after insert."""
    from aiokafka import AIOKafkaConsumer

    from jobtrail.store import Store
    from jobtrail.store.rows import EVENT_COLUMNS
    from schemas.events import parse_time

    store = Store.connect(f"chdb://{home / 'chdb'}")
    store.migrate()

    def row(v: dict[str, Any]) -> list[Any]:
        t = parse_time(v["time"])
        return [v["id"], 1, v["type"], v["source"], t, parse_time(v.get("observed_at", t)),
                v.get("severity", "info"), v.get("project", ""), v["cluster"],
                v.get("job_id", ""), v.get("attempt", 0), v.get("scope", ""),
                v.get("entity", ""), v.get("node", ""), v.get("message", ""),
                json.dumps(v.get("attributes", {})), v.get("producer", "")]

    async def run() -> dict[str, Any]:
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id="baseline",
                                    auto_offset_reset="earliest", enable_auto_commit=False,
                                    max_poll_records=50)
        await consumer.start()
        done = 0
        first: float | None = None
        cpu0 = 0.0
        try:
            deadline = time.monotonic() + 600
            while done < n and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=500, max_records=10)
                rows = [row(json.loads(line)) for msgs in batches.values() for m in msgs
                        for line in m.value.split(b"\n")]
                if not rows:
                    continue
                if first is None:
                    first, cpu0 = time.monotonic(), time.process_time()
                store.client.insert("events", rows, column_names=EVENT_COLUMNS)
                await consumer.commit()
                done += len(rows)
        finally:
            await consumer.stop()
        elapsed = time.monotonic() - (first or time.monotonic())
        return {"events": done, "seconds": elapsed, "cpu": time.process_time() - cpu0}

    return asyncio.run(run())


def embedded(home: Path, n: int) -> dict[str, Any]:
    from ingest.canonical import decode
    from jobtrail.config import Settings
    from jobtrail.learn import sample
    from jobtrail.runtime.embedded import EmbeddedRuntime

    runtime = EmbeddedRuntime(Settings(home=home))
    text = "\n".join(json.dumps(r) for r in sample.synthetic(n))
    records = decode(text, producer="bench", observed_at=datetime.now(UTC))
    started, cpu = time.monotonic(), time.process_time()
    runtime.submit(records)
    result = runtime.drain()
    runtime.close()  # the final snapshot is part of the cost
    return {"events": result.stored, "seconds": time.monotonic() - started,
            "cpu": time.process_time() - cpu}


def raw_chdb(home: Path, n: int, batch: int = 5000) -> dict[str, Any]:
    """The embedded baseline: the same canonical rows straight into `events` (chDB)."""
    from ingest.canonical import decode
    from jobtrail.learn import sample
    from jobtrail.store import Store
    from schemas.events import Event

    store = Store.connect(f"chdb://{home / 'chdb'}")
    store.migrate()
    text = "\n".join(json.dumps(r) for r in sample.synthetic(n))
    lines = [e.to_json().encode() for e in decode(text, producer="bench",
                                                  observed_at=datetime.now(UTC))
             if isinstance(e, Event)]
    started, cpu = time.monotonic(), time.process_time()
    for i in range(0, len(lines), batch):
        store.client.raw_insert("events", insert_block=b"\n".join(lines[i:i + batch]),
                                fmt="JSONEachRow",
                                settings={"input_format_json_read_objects_as_strings": 1,
                                          "date_time_input_format": "best_effort"})
    return {"events": len(lines), "seconds": time.monotonic() - started,
            "cpu": time.process_time() - cpu}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _processed(port: int, topic: str) -> int:
    """Messages of `topic` the worker has processed and stored: its shards' positions, from
    its probe (`/healthz`), which it moves after each batch. The group's committed offsets
    move only once a second (`broker_commit_interval`), a third of a 50k-event run."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as reply:
            body = json.loads(reply.read())
    except (OSError, ValueError):  # not up yet (or a 503 while the store retries)
        return 0
    return sum(offset + 1 for shard in body.get("partitions", {}).values()
               for stream, offset in shard.get("positions", {}).items()
               if stream.startswith(f"{topic}/") and offset >= 0)


def _worker(bootstrap: str, prefix: str, home: Path, wire_batch: int,
            key: bytes, messages: int) -> dict[str, Any]:
    """Offsets count messages; the caller converts them to events."""
    from tests.integration.kafka_helpers import Worker

    app_id = "bench-worker"
    worker = Worker(bootstrap, home, prefix, app_id, batch_size=5000)
    port = _free_port()
    worker.env["JOBTRAIL_WIRE_BATCH"] = str(wire_batch)
    worker.env["JOBTRAIL_WIRE_KEY"] = key.decode()
    worker.env["JOBTRAIL_WORKER_PORT"] = str(port)
    worker.start()
    topic = f"{prefix}events"
    first_t: float | None = None
    first_done, first_cpu = 0, 0.0
    deadline = time.monotonic() + 900
    try:
        while time.monotonic() < deadline:
            done = _processed(port, topic)
            now = time.monotonic()
            if done and first_t is None:
                first_t, first_done, first_cpu = now, done, _cpu(worker.proc)
            if done >= messages:
                assert first_t is not None
                return {"events": done - first_done, "seconds": max(now - first_t, 1e-9),
                        "total": done, "cpu": _cpu(worker.proc) - first_cpu}
            if not worker.alive():
                raise RuntimeError(worker.log.read_text()[-3000:])
            time.sleep(0.02)
        raise RuntimeError("worker did not finish in time")
    finally:
        worker.stop()


def _cpu(proc: subprocess.Popen[bytes] | None) -> float:
    """CPU seconds (user + system, all threads) the worker process has used so far."""
    assert proc is not None
    fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _child(kind: str, *args: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "bench.e2e", "--child", kind, *args],
                         capture_output=True, text=True, cwd=HERE, timeout=1200, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{kind} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--wire-batch", type=int, default=500,
                        help="events per Kafka message, as JOBTRAIL_WIRE_BATCH")
    parser.add_argument("--unsigned", action="store_true",
                        help="produce without the wire key: the worker validates every record")
    parser.add_argument("--child", default=None)
    parser.add_argument("args", nargs="*")
    opts = parser.parse_args()
    if opts.child == "baseline":
        bootstrap, topic, home = opts.args
        print(json.dumps(baseline(bootstrap, topic, Path(home), opts.events)))
        return
    if opts.child == "embedded":
        print(json.dumps(embedded(Path(opts.args[0]), opts.events)))
        return
    if opts.child == "raw-chdb":
        print(json.dumps(raw_chdb(Path(opts.args[0]), opts.events)))
        return

    from jobtrail.dev import kafka

    work = Path(tempfile.mkdtemp(prefix="jobtrail-bench-"))
    broker = kafka.start(work / "kafka")
    try:
        prefix = "bench."
        values = _records(opts.events, opts.wire_batch)
        key = b"" if opts.unsigned else secrets.token_hex(16).encode()
        t = time.monotonic()
        _produce(broker.bootstrap, f"{prefix}events", values, key)
        print(f"produced {opts.events} events in {len(values)} messages in "
              f"{time.monotonic() - t:.1f} s", flush=True)
        base = _child("baseline", "--events", str(opts.events), broker.bootstrap,
                      f"{prefix}events", str(work / "baseline"))
        worker = _worker(broker.bootstrap, prefix, work / "worker", opts.wire_batch, key,
                         len(values))
        worker["events"] = worker["events"] * opts.events // max(1, worker["total"])
        raw = _child("raw-chdb", "--events", str(opts.events), str(work / "raw-chdb"))
        emb = _child("embedded", "--events", str(opts.events), str(work / "embedded"))
    finally:
        kafka.stop(broker)
    runs = (("baseline", base), ("worker", worker), ("raw_chdb", raw), ("embedded", emb))
    rate = {k: v["events"] / v["seconds"] for k, v in runs}
    # CPU time per event does not grow with other work on the machine the way wall time does
    cpu = {k: v["cpu"] * 1e6 / max(1, v["events"]) for k, v in runs}
    print(json.dumps({
        "events": opts.events, "messages": len(values), "cores": os.cpu_count(),
        "signed": not opts.unsigned,
        **{f"{k}_events_per_s": round(v) for k, v in rate.items()},
        "ratio_worker_to_baseline": round(rate["worker"] / rate["baseline"], 3),
        "ratio_embedded_to_raw_chdb": round(rate["embedded"] / rate["raw_chdb"], 3),
        **{f"{k}_cpu_us_per_event": round(v, 1) for k, v in cpu.items()},
        "cpu_ratio_worker_to_baseline": round(cpu["baseline"] / cpu["worker"], 3),
        "cpu_ratio_embedded_to_raw_chdb": round(cpu["raw_chdb"] / cpu["embedded"], 3)},
        indent=2))


if __name__ == "__main__":
    main()
