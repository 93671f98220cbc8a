"""Backfill: how long a month of one cluster's events takes to replay into a fresh store.

A month of a 2,000-node cluster (8 GPUs a node, 250 jobs of 8 nodes running at once, each
1-3 h) is, at the rates below, about 29 M events. Replaying all of them here would take
hours on a shared machine, so a slice with the same mix is replayed through the embedded
runtime (the framed log, every processor, chDB) into a fresh store, and the month's time is
the slice's rate applied to the month's count. The same canonical rows inserted raw into
`events` (JSONEachRow, 5k a batch) in the same run give the ratio to compare across machines.

Rates assumed per 1,000 nodes and hour (what a fleet of this size produces once metrics
stay in Prometheus and only state changes and errors become events; docs/scaling.md):

    scheduler (start, end, requeue, drain)            ~   250
    training progress (a step or checkpoint line per job per minute)   ~ 7,500
    node and GPU health (a health check per node every 5 min, ECC, Xid) ~ 12,000
    network and storage (link flaps, counters, slow targets)           ~    250

about 20,000 events per 1,000 nodes an hour, 40,000 an hour for 2,000 nodes: 28.8 M a month.

    python -m bench.backfill --events 60000
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
NODES = 2000
EVENTS_PER_1000_NODES_H = 20_000
MONTH_H = 30 * 24


def month_events(nodes: int = NODES) -> int:
    return nodes * EVENTS_PER_1000_NODES_H // 1000 * MONTH_H


def _slice(n: int) -> list[Any]:
    """`n` canonical events of the 2,000-node cluster, in event-time order, at its rate."""
    from bench.memory_load import Load, _events

    per_s = NODES * EVENTS_PER_1000_NODES_H / 1000 / 3600
    load = Load(NODES, NODES // 8, spacing_ms=max(1, round(1000 / per_s)))
    records = load.opening()
    while len(records) < n:
        records.extend(load.batch(min(5000, n - len(records))))
    return _events(records[:n])


def embedded(home: Path, n: int) -> dict[str, Any]:
    from jobtrail.config import Settings
    from jobtrail.runtime.embedded import EmbeddedRuntime

    events = _slice(n)
    runtime = EmbeddedRuntime(Settings(home=home))
    started = time.process_time(), time.monotonic()
    stored = 0
    for i in range(0, len(events), 20_000):  # bounded: the log and a drain a chunk at a time
        runtime.submit(events[i:i + 20_000])
        stored += runtime.drain().stored
    runtime.close()
    return {"events": stored, "seconds": time.monotonic() - started[1],
            "cpu_s": time.process_time() - started[0]}


def raw_chdb(home: Path, n: int, batch: int = 5000) -> dict[str, Any]:
    from jobtrail.store import Store

    lines = [e.to_json().encode() for e in _slice(n)]
    store = Store.connect(f"chdb://{home / 'chdb'}")
    store.migrate()
    started = time.process_time(), time.monotonic()
    for i in range(0, len(lines), batch):
        store.client.raw_insert("events", insert_block=b"\n".join(lines[i:i + batch]),
                                fmt="JSONEachRow",
                                settings={"input_format_json_read_objects_as_strings": 1,
                                          "date_time_input_format": "best_effort"})
    return {"events": len(lines), "seconds": time.monotonic() - started[1],
            "cpu_s": time.process_time() - started[0]}


def _child(kind: str, home: Path, n: int) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "bench.backfill", "--child", kind,
                          "--events", str(n), str(home)], capture_output=True, text=True,
                         cwd=HERE, timeout=3600, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{kind} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=60_000, help="the slice replayed")
    parser.add_argument("--child", default=None)
    parser.add_argument("home", nargs="?")
    opts = parser.parse_args()
    if opts.child:  # chDB holds one engine per process: each path is a child
        run = embedded if opts.child == "embedded" else raw_chdb
        print(json.dumps(run(Path(opts.home), opts.events)))
        return
    with tempfile.TemporaryDirectory(prefix="jobtrail-backfill-") as tmp:
        raw = _child("raw-chdb", Path(tmp) / "raw", opts.events)
        emb = _child("embedded", Path(tmp) / "embedded", opts.events)
    month = month_events()
    rate = emb["events"] / emb["seconds"]
    cpu_rate = emb["events"] / emb["cpu_s"]
    print(json.dumps({
        "nodes": NODES, "month_events": month, "slice_events": emb["events"],
        "embedded_events_per_s": round(rate), "embedded_events_per_cpu_s": round(cpu_rate),
        "raw_chdb_events_per_s": round(raw["events"] / raw["seconds"]),
        "ratio_embedded_to_raw_chdb": round(rate / (raw["events"] / raw["seconds"]), 3),
        "month_minutes_wall": round(month / rate / 60, 1),
        "month_minutes_one_core": round(month / cpu_rate / 60, 1)}, indent=2))


if __name__ == "__main__":
    main()
