"""Signal to incident opened, in cluster mode: real broker, `jobtrail worker`, chDB.

Two phases on one broker and one worker, in the same run:
- idle: fatal Xid signals alone, one every `--interval` seconds;
- loaded: the same signals while the skeleton's synthetic load streams at `--rate` events/s
  (steps, ECC counters, NCCL timeouts of 50 jobs: the detector works on all of it).
Each signal is stamped `observed_at` when it is produced; the incident's `opened` row is
stamped by ClickHouse when it is inserted (`incident_log.recorded_at`). Latency = recorded -
observed, i.e. broker + worker batch + detection + ClickHouse write. Printed: p50/p95/max per
phase and the loaded/idle ratio (the figure to compare across machines).

    python -m bench.incident_latency --rate 8000 --seconds 30
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent


def _signal(k: int, phase: str) -> bytes:
    from ingest.canonical import decode

    now = datetime.now(UTC)
    record = {"type": "node.xid", "time": now.isoformat(), "cluster": "cluster-a",
              "scope": "gpu", "entity": f"{phase}-node-{k:04d}/gpu0",
              "node": f"{phase}-node-{k:04d}", "attributes": {"xid": 79}}
    (event,) = decode(json.dumps(record), producer="bench", observed_at=now)
    return event.to_json().encode()  # type: ignore[union-attr]


def _background(n: int) -> list[bytes]:
    from ingest.canonical import decode
    from jobtrail.learn import sample
    from jobtrail.runtime.kafka_io import batch_by_cluster
    from schemas.events import Event

    text = "\n".join(json.dumps(r) for r in sample.synthetic(n))
    events = [d for d in decode(text, producer="bench", observed_at=datetime.now(UTC))
              if isinstance(d, Event)]
    return [value for _, value in batch_by_cluster(events, 500)]


async def _stream(bootstrap: str, topic: str, phase: str, signals: int, interval: float,
                  background: list[bytes], rate: float) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=2)
    await producer.start()
    try:
        start = time.monotonic()
        next_signal, sent, k = start, 0, 0
        per_message = 500 / rate if rate else 0.0
        while k < signals:
            now = time.monotonic()
            if now >= next_signal:
                await (await producer.send(topic, _signal(k, phase), key=b"cluster-a"))
                k += 1
                next_signal += interval
            if background and sent < len(background) and now >= start + sent * per_message:
                await producer.send(topic, background[sent], key=b"cluster-a")
                sent += 1
                continue
            await asyncio.sleep(0.002)
        await producer.flush()
    finally:
        await producer.stop()


def _latencies(home: Path) -> dict[str, list[float]]:
    out = subprocess.run([sys.executable, "-m", "bench.incident_latency", "--child", str(home)],
                         capture_output=True, text=True, cwd=HERE, timeout=600, check=False)
    if out.returncode:
        raise RuntimeError(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def child(home: Path) -> dict[str, list[float]]:
    from jobtrail.store import Store

    store = Store.connect(f"chdb://{home / 'chdb'}")
    rows = store._dicts(
        "SELECT e.entity AS entity, "
        "dateDiff('millisecond', e.observed_at, l.recorded_at) AS ms "
        "FROM incident_log AS l INNER JOIN events AS e "
        "ON e.id = JSONExtractString(l.data, 'first_event') "
        "WHERE l.kind = 'opened' AND e.type = 'node.xid'")
    out: dict[str, list[float]] = {"warmup": [], "idle": [], "loaded": []}
    for row in rows:
        out[row["entity"].split("-", 1)[0]].append(row["ms"] / 1000)
    return out


def _summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    if not ordered:
        return {"n": 0}
    return {"n": len(ordered), "p50_s": round(statistics.median(ordered), 3),
            "p95_s": round(ordered[int(0.95 * (len(ordered) - 1))], 3),
            "max_s": round(ordered[-1], 3)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=float, default=8000, help="background events/s")
    parser.add_argument("--seconds", type=float, default=30, help="length of each phase")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between signals")
    parser.add_argument("--child", default=None)
    opts = parser.parse_args()
    if opts.child:
        print(json.dumps(child(Path(opts.child))))
        return

    from jobtrail.dev import kafka
    from tests.integration.kafka_helpers import Worker, wait_caught_up

    work = Path(tempfile.mkdtemp(prefix="jobtrail-latency-"))
    broker = kafka.start(work / "kafka")
    signals = int(opts.seconds / opts.interval)
    background = _background(int(opts.rate * opts.seconds))
    try:
        prefix = "lat."
        from jobtrail.config import Settings
        from jobtrail.runtime.kafka_io import ensure_topics

        asyncio.run(ensure_topics(Settings(kafka=broker.bootstrap, topic_prefix=prefix)))
        worker = Worker(broker.bootstrap, work / "worker", prefix, "latency", batch_size=5000)
        worker.env["JOBTRAIL_BATCH_SECONDS"] = "0.5"
        worker.start()
        try:
            topic = f"{prefix}events"
            asyncio.run(_stream(broker.bootstrap, topic, "warmup", 3, 0.5, [], 0))
            asyncio.run(_stream(broker.bootstrap, topic, "idle", signals, opts.interval, [], 0))
            t = time.monotonic()
            asyncio.run(_stream(broker.bootstrap, topic, "loaded", signals, opts.interval,
                                background, opts.rate))
            produced_s = time.monotonic() - t
            wait_caught_up(broker.bootstrap, "latency", [topic], worker, timeout_s=600)
        finally:
            worker.stop()
        found = _latencies(work / "worker")
    finally:
        kafka.stop(broker)
    idle, loaded = _summary(found["idle"]), _summary(found["loaded"])
    result: dict[str, Any] = {
        "background_events_per_s": opts.rate, "background_events": len(background) * 500,
        "loaded_phase_s": round(produced_s, 1), "idle": idle, "loaded": loaded,
        "ratio_loaded_to_idle_p50": round(loaded.get("p50_s", 0) / max(idle.get("p50_s", 1e-9),
                                                                        1e-9), 2),
        "target_s": 5.0}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
