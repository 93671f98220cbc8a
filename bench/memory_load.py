"""The soak's load and harness (`bench.memory`, `bench.backfill`, the state tests): canonical
records of a fleet whose attempts churn, the store stand-in evicted incidents are read back
from, a driver that resolves incidents like a person, and what each structure of a
partition's state holds."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta
from typing import Any

T0 = datetime(2026, 11, 1, tzinfo=UTC)
NODES_PER_JOB = 8


def _wiring(nodes: int) -> Any:
    from processors.topology import Topology
    from schemas.topology import TopologyFile, fat_tree

    return Topology.from_file(TopologyFile.model_validate(fat_tree(nodes, cluster="mem")))


def _iso(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


class Load:
    """Canonical records of a fleet whose `open_jobs` attempts churn."""

    ECC_SHARE = 0.05
    """Share of events that are a correctable ECC error on one of the job's nodes."""

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

    def ecc_per_node_hour(self) -> float:
        """Correctable ECC errors a node reports per hour of event time (every node carries
        the same number of jobs)."""
        return self.ECC_SHARE * 3600 / (self.spacing.total_seconds() * self.nodes)

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
            elif roll < self.ECC_SHARE:
                node = nodes[self.seq % len(nodes)]
                out.append({**base, "type": "node.ecc", "scope": "gpu",
                            "entity": f"{node}/gpu0", "node": node,
                            "attributes": {"gpu": "0", "kind": "sbe", "count": 1}})
            elif roll < self.ECC_SHARE + self.incident_rate:
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
    resident = list(dict.values(book.incidents))  # not folding evicted ones back
    return {"jobs": len(pipeline.jobs), "placed": len(pipeline.membership._placed),
            "spans": sum(len(v) for v in pipeline.membership._index.values()),
            "waiting": sum(len(v) for v in pipeline._waiting.values()),
            "waiting_order": len(pipeline._waiting_order),
            "attributed": len(pipeline._attributed),
            "incidents": len(resident), "evicted": len(book.incidents.evicted),
            "evidence": sum(len(i.evidence) for i in resident),
            "decision_ids": sum(len(i.applied) for i in resident),
            "impacts": sum(len(i.jobs) for i in resident),
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
