"""Worker memory: resident set vs topology size and open attempts, and over a soak.

The processors' state is what a worker holds per partition (`Pipeline`: jobs, membership,
wiring, waiting events, the incident book), so it is measured on the pure pipeline, without
a store or broker in the process. Three figures:

1. topology: RSS after loading fat-tree wirings of 500 to 4,000 nodes (one child process each);
2. attempts: RSS as 5k, 10k and 20k attempts are open at once on the 4,000-node wiring
   (8 nodes each), with the size of the saved state (`snapshot.dumps`);
3. soak: a steady stream with the attempts churning (a job runs 1-3 h of event time,
   completes, and a new one starts, so 20k stay open; the first ones start part-way through,
   at a random share of their run, so attempts end and start at a steady rate from the
   beginning): steps, ECC events (5 %), NCCL timeouts (`--incident-rate`, each opening an
   incident), one event per `--spacing-ms` of event time (3 ms: a step a minute from each of
   20k jobs; the hang rule's 15 min stays far); a job whose NCCL times out fails there and
   a new one starts. Incidents open and close: a person resolves
   each `--resolve-after-min` after it opened (event time), and the pipeline evicts it
   `--evict-after-min` later; the store it is read back from is a SQLite file
   (`FileArchive`), outside the measured state. A warm-up of `--warmup-hours` of event time
   (by default: until every window is full, `warmup_hours`) comes first; then the measured
   phase runs `--minutes` of wall time or `--event-hours` of event time, whichever ends
   first, with RSS sampled every `--minutes / 10` and printed with what each structure holds
   (`sizes`). The figures that say flat or not: the measured phase's last RSS against its
   first, and its slope (MB per 10 min, least squares).

    python -m bench.memory --soak-only --minutes 120
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from typing import Any

from bench.memory_load import T0, Churn, FileArchive, Load, _events, _pipeline, _wiring, sizes


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def topology_child(nodes: int) -> dict[str, Any]:
    import processors.pipeline  # noqa: F401  (the code, so the figure is the wiring's)

    _wiring(8)
    gc.collect()
    before = rss_mb()
    wiring = _wiring(nodes)
    gc.collect()
    return {"nodes": nodes, "rss_mb": round(rss_mb(), 1),
            "wiring_mb": round(rss_mb() - before, 1), "held": wiring is not None}


def attempts(nodes: int, steps: tuple[int, ...]) -> list[dict[str, Any]]:
    from jobtrail.runtime.snapshot import dumps

    pipeline = _pipeline(nodes)
    gc.collect()
    rows = [{"open_attempts": 0, "rss_mb": round(rss_mb(), 1), "state_kb": 0}]
    load = Load(nodes, 0)
    for count in steps:
        fresh = [load.start() for _ in range(count - len(load.running))]
        for i in range(0, len(fresh), 5000):
            pipeline.process(_events(fresh[i:i + 5000]))
        gc.collect()
        rows.append({"open_attempts": len(pipeline.jobs), "rss_mb": round(rss_mb(), 1),
                     "state_kb": len(dumps(pipeline, {"bench": 0})) // 1024})
    return rows


def warmup_hours(retention_h: float, resolve_after_min: float, evict_after_min: float,
                 lateness: timedelta = timedelta(minutes=10),
                 ecc_per_node_hour: float = 0.0) -> float:
    """Event time until every window is full: ended jobs kept `retention_h`, remembered
    signals and counts (`Rules.memory_s` plus the lateness horizon), an incident's life
    (resolved, or its failed job forgotten, then evicted), a node's standing ECC incident
    holding its `max_signal_evidence` signals (`ecc_per_node_hour`: the load's rate; a
    tenth more for the signals before it opens), with a sweep's period (10 min) to spare."""
    from processors.incidents.rules import load_rules

    rules = load_rules()
    held = max(timedelta(hours=retention_h), timedelta(minutes=resolve_after_min))
    windows = [timedelta(hours=retention_h),
               timedelta(seconds=rules.memory_s) + lateness,
               held + timedelta(minutes=evict_after_min) + lateness]
    if ecc_per_node_hour > 0:
        windows.append(timedelta(hours=1.1 * rules.max_signal_evidence / ecc_per_node_hour))
    return (max(windows) + timedelta(minutes=10)).total_seconds() / 3600


def _sample(phase: str, started: float, load: Load, churn: Churn, archive: FileArchive,
            pipeline: Any, events: int) -> dict[str, Any]:
    gc.collect()
    return {"phase": phase, "minute": round((time.monotonic() - started) / 60, 1),
            "events": events, "rss_mb": round(rss_mb(), 1),
            "event_hours": round((load.t - T0).total_seconds() / 3600, 2),
            "attempts_started": load.next_job,
            "incidents_opened": churn.resolved + len(churn.opened),
            "incidents_resolved": churn.resolved, "archive_reads": archive.reads,
            **sizes(pipeline)}


def _slope(samples: list[dict[str, Any]]) -> float:
    """MB per 10 min of wall time, least squares."""
    xs = [s["minute"] for s in samples]
    ys = [s["rss_mb"] for s in samples]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    cov = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    return 0.0 if var == 0 else cov / var * 10


def soak(nodes: int, open_jobs: int, minutes: float, batch: int, spacing_ms: int,
         retention_h: float, event_hours: float = 1e9, incident_rate: float = 0.0001,
         resolve_after_min: float = 20, evict_after_min: float = 10,
         warmup_h: float | None = None, total_minutes: float = 1e9) -> dict[str, Any]:
    from processors.incidents.eviction import Eviction

    pipeline = _pipeline(nodes)
    pipeline.job_retention = timedelta(hours=retention_h)
    # on disk: an in-memory database (the default) grew the process by the whole log
    store = tempfile.TemporaryDirectory(prefix="bench-memory-")
    archive = FileArchive(os.path.join(store.name, "incident_log.sqlite"))
    pipeline.archive(archive, Eviction(after=timedelta(minutes=evict_after_min),
                                       quiet_after=timedelta(hours=retention_h)))
    load = Load(nodes, open_jobs, spacing_ms=spacing_ms, incident_rate=incident_rate)
    churn = Churn(pipeline, load, archive, timedelta(minutes=resolve_after_min))
    if warmup_h is None:
        warmup_h = warmup_hours(retention_h, resolve_after_min, evict_after_min,
                                pipeline.lateness, load.ecc_per_node_hour())
    started = time.monotonic()
    opening = load.opening()
    for i in range(0, len(opening), batch):
        pipeline.process(_events(opening[i:i + batch]))
    events = 0

    def sample(phase: str) -> dict[str, Any]:
        row = _sample(phase, started, load, churn, archive, pipeline, events)
        print(json.dumps(row), flush=True)
        return row

    warmup = [sample("warm-up")]
    next_hour = 0.5
    give_up = started + total_minutes * 60
    while load.t - T0 < timedelta(hours=warmup_h) and time.monotonic() < give_up:
        events += churn.step(batch)
        if load.t - T0 >= timedelta(hours=next_hour):
            warmup.append(sample("warm-up"))
            next_hour += 0.5
    measured_from, events_from, hours_from = time.monotonic(), events, load.t
    samples = [sample("measured")]
    deadline = min(measured_from + minutes * 60, started + total_minutes * 60)
    next_sample = measured_from + minutes * 6  # ten samples
    end_at = T0 + timedelta(hours=warmup_h + min(event_hours, 1e5))
    while True:
        events += churn.step(batch)
        now = time.monotonic()
        if now >= next_sample or now >= deadline or load.t >= end_at:
            samples.append(sample("measured"))
            next_sample = now + minutes * 6
            if now >= deadline or load.t >= end_at:
                break
    first, last = samples[0], samples[-1]
    wall = max(time.monotonic() - measured_from, 1e-9)
    archive.db.close()
    store.cleanup()
    return {"warmup_event_hours": round(warmup_h, 2),
            "warmup_complete": hours_from - T0 >= timedelta(hours=warmup_h),
            "warmup_minutes": round((measured_from - started) / 60, 1),
            "measured_minutes": round(wall / 60, 1), "measured_events": events - events_from,
            "events_per_s": round((events - events_from) / wall),
            "measured_event_hours": round((load.t - hours_from).total_seconds() / 3600, 2),
            "rss_start_mb": first["rss_mb"], "rss_end_mb": last["rss_mb"],
            "rss_change_pct": round((last["rss_mb"] / first["rss_mb"] - 1) * 100, 1),
            "rss_min_mb": min(s["rss_mb"] for s in samples),
            "rss_max_mb": max(s["rss_mb"] for s in samples),
            "slope_mb_per_10min": round(_slope(samples), 1),
            "slope_second_half_mb_per_10min": round(_slope(
                [s for s in samples if s["minute"] >= (first["minute"] + last["minute"]) / 2]),
                1),
            "attempts_started": load.next_job, "incidents_resolved": churn.resolved,
            "first": first, "final": sizes(pipeline)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--nodes", type=int, default=4000)
    parser.add_argument("--attempts", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=5000)
    parser.add_argument("--spacing-ms", type=int, default=3)
    parser.add_argument("--retention-h", type=float, default=2.0,
                        help="ended jobs kept this long (event time; 24 h in service, "
                             "shortened like the soak's time)")
    parser.add_argument("--event-hours", type=float, default=1e9,
                        help="end the soak after this much event time")
    parser.add_argument("--incident-rate", type=float, default=0.0001,
                        help="share of events that are an NCCL timeout (an incident)")
    parser.add_argument("--resolve-after-min", type=float, default=20.0)
    parser.add_argument("--evict-after-min", type=float, default=10.0)
    parser.add_argument("--warmup-hours", type=float, default=None,
                        help="event time before the measured phase (default: until every "
                             "window is full)")
    parser.add_argument("--total-minutes", type=float, default=1e9,
                        help="end the measured phase by this much wall time from the start")
    parser.add_argument("--soak-only", action="store_true")
    parser.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.child:
        print(json.dumps(topology_child(opts.child)))
        return
    if opts.soak_only:
        _soak(opts)
        return
    print("topology (one process each):")
    for nodes in (500, 1000, 2000, opts.nodes):
        out = subprocess.run([sys.executable, "-m", "bench.memory", "--child", str(nodes)],
                             capture_output=True, text=True, check=True, timeout=600)
        print("  " + out.stdout.strip().splitlines()[-1], flush=True)
    print(f"open attempts on {opts.nodes} nodes:")
    steps = tuple(sorted({opts.attempts // 4, opts.attempts // 2, opts.attempts}))
    for row in attempts(opts.nodes, steps):
        print("  " + json.dumps(row), flush=True)
    _soak(opts)


def _soak(opts: argparse.Namespace) -> None:
    print(f"soak, warm-up then {opts.minutes} min measured, {opts.attempts} attempts "
          "churning:", flush=True)
    print(json.dumps(soak(opts.nodes, opts.attempts, opts.minutes, opts.batch,
                          opts.spacing_ms, opts.retention_h, opts.event_hours,
                          opts.incident_rate, opts.resolve_after_min, opts.evict_after_min,
                          opts.warmup_hours, opts.total_minutes), indent=2))


if __name__ == "__main__":
    main()
