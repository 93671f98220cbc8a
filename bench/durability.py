"""What "accepted means durable" and exact restarts cost, measured in one run.

- appends: `EmbeddedLog.append` of `--batch` records, `--appends` times, with fsync on every
  append (the default, what ingest promises) and with fsync off (the baseline): per-append
  latency p50/p99 and the ratio;
- snapshots: after `--events` synthetic events, one save of the processors' state: size and
  time, and what that is per second of processing at the default 10 s interval;
- restart: opening the runtime again (load the snapshot) vs replaying the same events.

    python -m bench.durability --events 100000
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def _appends(directory: Path, fsync: str, appends: int, batch: int) -> list[float]:
    from jobtrail.runtime.log import EmbeddedLog

    log = EmbeddedLog(directory, fsync=fsync)  # type: ignore[arg-type]
    payload = json.dumps({"type": "job.step", "time": "2026-11-30T09:00:00Z",
                          "cluster": "c", "project": "p", "job_id": "j", "attempt": 1,
                          "attributes": {"step": 1, "loss": 2.0}}).encode()
    took = []
    for _ in range(appends):
        started = time.perf_counter()
        log.append([("E", payload)] * batch)
        took.append(time.perf_counter() - started)
    return took


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--appends", type=int, default=300)
    parser.add_argument("--batch", type=int, default=100)
    opts = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="jobtrail-durability-"))
    out: dict[str, Any] = {"appends": opts.appends, "records_per_append": opts.batch}
    for policy in ("always", "never"):
        took = _appends(work / f"log-{policy}", policy, opts.appends, opts.batch)
        out[f"append_{policy}_p50_ms"] = round(statistics.median(took) * 1000, 3)
        out[f"append_{policy}_p99_ms"] = round(_pct(took, 0.99) * 1000, 3)
    out["fsync_cost_ratio_p50"] = round(out["append_always_p50_ms"] /
                                        max(out["append_never_p50_ms"], 1e-6), 1)

    from ingest.canonical import decode
    from jobtrail.config import Settings
    from jobtrail.learn import sample
    from jobtrail.runtime.embedded import EmbeddedRuntime

    home = work / "home"
    runtime = EmbeddedRuntime(Settings(home=home, snapshot_interval_s=10**9))
    records = decode("\n".join(json.dumps(r) for r in sample.synthetic(opts.events)),
                     producer="bench", observed_at=datetime.now(UTC))
    started = time.perf_counter()
    runtime.submit(records)
    runtime.drain()
    processing = time.perf_counter() - started
    started = time.perf_counter()
    size = runtime.runner.snapshots.save(runtime.sink.pipeline,  # type: ignore[union-attr]
                                         {"embedded": runtime.runner.applied})
    snapshot_s = time.perf_counter() - started
    out.update(events=opts.events, processing_s=round(processing, 2),
               events_per_s=round(opts.events / processing),
               snapshot_bytes=size, snapshot_ms=round(snapshot_s * 1000, 1),
               snapshot_share_at_10s_interval=round(snapshot_s / 10, 4))
    runtime.runner.checkpoint()
    runtime.lock.release()
    started = time.perf_counter()
    reopened = EmbeddedRuntime(Settings(home=home), store=runtime.store)
    out["restart_from_snapshot_s"] = round(time.perf_counter() - started, 3)
    out["restart_replay_ratio"] = round(out["restart_from_snapshot_s"] / processing, 4)
    out["restored"] = reopened.runner.restored
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
