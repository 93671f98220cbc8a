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
import random
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from typing import Any

T0 = datetime(2026, 11, 1, tzinfo=UTC)
NODES_PER_JOB = 8


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def _wiring(nodes: int) -> Any:
    from processors.topology import Topology
    from schemas.topology import TopologyFile, fat_tree

    return Topology.from_file(TopologyFile.model_validate(fat_tree(nodes, cluster="mem")))


def _iso(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


class Load:
    """Canonical records of a fleet whose `open_jobs` attempts churn."""

    def __init__(self, nodes: int, open_jobs: int, seed: int = 16, spacing_ms: int = 3,
                 incident_rate: float = 0.0001, staggered: bool = True) -> None:
        self.nodes, self.open_jobs = nodes, open_jobs
        self.incident_rate = incident_rate
        self.spacing = timedelta(milliseconds=spacing_ms)
        self.rng = random.Random(seed)
        self.staggered = staggered
        self.next_job = 0
        self.running: dict[str, tuple[list[str], datetime, int]] = {}  # job -> nodes, end, step
        self.t = T0
        self.seq = 0

    def start(self, part_way: bool = False) -> dict[str, Any]:
        """A new attempt; `part_way`: its remaining run is a random share of one (the soak's
        first attempts, so they do not all end in the same hour)."""
        j = self.next_job
        self.next_job += 1
        first = (j * NODES_PER_JOB) % self.nodes
        nodes = [f"mem-node-{(first + k) % self.nodes:04d}" for k in range(NODES_PER_JOB)]
        job = f"mem-job-{j}"
        run = self.rng.uniform(3600, 10800) * (self.rng.random() if part_way else 1.0)
        end = self.t + timedelta(seconds=run)
        self.running[job] = (nodes, end, 0)
        return {"id": f"start-{j}", "type": "job.started", "time": _iso(self.t),
                "project": f"proj-{j % 20}", "cluster": "mem", "job_id": job, "attempt": 1,
                "attributes": {"nodes": nodes, "gpus": 8 * NODES_PER_JOB}}

    def opening(self) -> list[dict[str, Any]]:
        # in (time, id) order: the detector re-evaluates an event that arrives behind one
        # it already saw, and these all share one time
        return sorted((self.start(self.staggered)
                       for _ in range(self.open_jobs - len(self.running))),
                      key=lambda r: r["id"])

    def batch(self, n: int) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        jobs = list(self.running)
        for _ in range(n):
            self.seq += 1
            self.t += self.spacing
            job = jobs[self.rng.randrange(len(jobs))]
            nodes, end, step = self.running[job]
            project = f"proj-{int(job.rsplit('-', 1)[1]) % 20}"
            base = {"id": f"e-{self.seq}", "time": _iso(self.t), "cluster": "mem"}
            roll = self.rng.random()
            if self.t >= end:
                del self.running[job]
                jobs.remove(job)
                out.append({**base, "type": "job.completed", "project": project,
                            "job_id": job, "attempt": 1})
                out.append(self.start())
                jobs.append(f"mem-job-{self.next_job - 1}")
            elif roll < 0.05:
                node = nodes[self.seq % len(nodes)]
                out.append({**base, "type": "node.ecc", "scope": "gpu",
                            "entity": f"{node}/gpu0", "node": node,
                            "attributes": {"gpu": "0", "kind": "sbe", "count": 1}})
            elif roll < 0.05 + self.incident_rate:
                # the watchdog takes the job down: it fails, and a new one starts
                out.append({**base, "type": "comm.nccl_timeout", "project": project,
                            "job_id": job, "attempt": 1, "severity": "error",
                            "message": "Watchdog caught collective operation timeout",
                            "attributes": {"rank": 0, "seq_num": self.seq}})
                del self.running[job]
                jobs.remove(job)
                out.append({**base, "id": f"e-{self.seq}-failed", "type": "job.failed",
                            "project": project, "job_id": job, "attempt": 1,
                            "severity": "error", "message": "NCCL watchdog timeout"})
                out.append(self.start())
                jobs.append(f"mem-job-{self.next_job - 1}")
            else:
                self.running[job] = (nodes, end, step + 1)
                out.append({**base, "type": "job.step", "project": project, "job_id": job,
                            "attempt": 1, "attributes": {"step": step + 1,
                                                         "step_time_s": 1.0}})
        return out


def _events(records: list[dict[str, Any]]) -> list[Any]:
    from ingest.canonical import decode
    from schemas.events import Event

    text = "\n".join(json.dumps(r) for r in records)
    return [e for e in decode(text, producer="bench", observed_at=T0) if isinstance(e, Event)]


def _pipeline(nodes: int) -> Any:
    from processors.pipeline import Pipeline

    return Pipeline(timedelta(seconds=30), _wiring(nodes))


def sizes(pipeline: Any) -> dict[str, int]:
    """What each structure of a partition's state holds (entries; the checkpoints in KB)."""
    book, late = pipeline.detector.book, pipeline.reorder
    return {"jobs": len(pipeline.jobs), "placed": len(pipeline.membership._placed),
            "spans": sum(len(v) for v in pipeline.membership._index.values()),
            "waiting": sum(len(v) for v in pipeline._waiting.values()),
            "waiting_order": len(pipeline._waiting_order),
            "attributed": len(pipeline._attributed),
            "incidents": len(book.incidents.resident()), "evicted": len(book.incidents.evicted),
            "open": len(book.open), "resolved": len(book.resolved),
            "by_attempt": len(book.by_attempt), "pending": len(book.pending),
            "detector_jobs": len(book.jobs), "progress": len(book.progress),
            "signals": len(book.signals), "counts": len(book.counts),
            "timers": len(book.timers), "node_incidents": len(book.node_incidents),
            "symptom_counts": len(book.symptom_counts), "last_touch": len(book.last_touch),
            "resolved_at": len(book.resolved_at), "opened_observed": len(book.opened_observed),
            "planned": len(book.planned), "ready": len(book.ready), "folded": len(book.folded),
            "journal": len(late.journal), "checkpoints": len(late.checkpoints),
            "checkpoint_kb": sum(len(c.book) for c in late.checkpoints) // 1024,
            "touched": len(late.touched), "recalls": len(late.recalls),
            "unlisted": len(late.unlisted)}


_sizes = sizes


class FileArchive:
    """The store stand-in evicted incidents are read back from: a SQLite file (`path`), so
    the log the soak writes is not in the measured memory; `:memory:` for small tests."""

    def __init__(self, path: str = ":memory:") -> None:
        import sqlite3

        self.db = sqlite3.connect(path)
        self.db.execute("CREATE TABLE IF NOT EXISTS log (incident TEXT, seq INT, body TEXT)")
        self.db.execute("CREATE INDEX IF NOT EXISTS by_incident ON log (incident)")
        self.reads = 0

    def add(self, events: list[Any]) -> None:
        self.db.executemany("INSERT INTO log VALUES (?, ?, ?)",
                            [(e.incident_id, e.seq, e.to_json()) for e in events])

    def log(self, incident_id: str) -> list[Any]:
        from processors.incidents.model import IncidentEvent

        self.reads += 1
        rows = self.db.execute("SELECT body FROM log WHERE incident = ? ORDER BY seq",
                               (incident_id,)).fetchall()
        return [IncidentEvent.model_validate_json(r[0]) for r in rows]

    def on_entities(self, entities: Any) -> list[str]:
        return []


class Churn:
    """Drives a pipeline like a runtime: each batch's incident events to the archive, and a
    person resolving every incident `resolve_after` after it opened (event time)."""

    def __init__(self, pipeline: Any, load: Load, archive: Any,
                 resolve_after: timedelta) -> None:
        self.pipeline, self.load, self.archive = pipeline, load, archive
        self.resolve_after = resolve_after
        self.opened: dict[str, datetime] = {}
        self.resolved = 0

    def step(self, batch: int) -> int:
        from processors.incidents.model import Actor, Command, InvalidTransition

        chunk = self.load.batch(batch)
        out = self.pipeline.process(_events(chunk))
        self.archive.add(out.incidents)
        self.opened.update({e.incident_id: e.time for e in out.incidents if e.kind == "opened"})
        due = sorted(i for i, at in self.opened.items() if self.load.t - at >= self.resolve_after)
        for inc_id in due:
            del self.opened[inc_id]
            try:
                done = self.pipeline.command(Command(
                    command_id=f"resolve-{inc_id}", incident_id=inc_id, command="resolve",
                    actor=Actor(kind="person", name="sre"), time=self.load.t,
                    data={"summary": "bench"})).incidents
            except InvalidTransition:  # merged into another by a late event: closed
                continue
            self.archive.add(done)
            self.resolved += bool(done)
        return len(chunk)


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
                 lateness: timedelta = timedelta(minutes=10)) -> float:
    """Event time until every window is full: ended jobs kept `retention_h`, remembered
    signals and counts (`Rules.memory_s` plus the lateness horizon), an incident's life
    (resolved, or its failed job forgotten, then evicted), with a sweep's period (10 min)
    to spare."""
    from processors.incidents.rules import load_rules

    held = max(timedelta(hours=retention_h), timedelta(minutes=resolve_after_min))
    windows = [timedelta(hours=retention_h),
               timedelta(seconds=load_rules().memory_s) + lateness,
               held + timedelta(minutes=evict_after_min) + lateness]
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
                                pipeline.lateness)
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
    while load.t - T0 < timedelta(hours=warmup_h):
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
