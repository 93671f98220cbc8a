"""The documented fleet mix (docs/scaling.md, "How large a cluster one worker follows"): what a
cluster sends once metrics stay in Prometheus and only state changes and errors become
events. Per 1,000 nodes and hour:

    scheduler: submits, starts, ends, requeues (jobs of 8 nodes, 1-3 h)     ~   250
    training progress: a step line per job a minute, a checkpoint each 30 min ~ 7,500
    node and GPU health: a check per node every 5 min, ECC, thermal, Xid   ~ 12,000
    network and storage: link error counters, port flaps, slow targets     ~   250

About 20,000 events (5.6 a second); most of them (the health checks and the progress
lines) can never open an incident. Now and then a GPU falls off the bus (a fatal Xid) under
a running job: its ranks time out (one NCCL timeout per rank), the attempt fails and the
job is requeued and restarts from its last checkpoint, so the detector has real work too.

Canonical records in event-time order, deterministic for a seed (`FleetLoad.records`).
"""

from __future__ import annotations

import heapq
import random
from datetime import UTC, datetime, timedelta
from typing import Any

T0 = datetime(2026, 11, 1, tzinfo=UTC)
NODES_PER_JOB = 8
RANKS_PER_NODE = 8
CLUSTER = "fleet"
STEP_EVERY_S = 60.0
HEALTH_EVERY_S = 300.0
CHECKPOINT_EVERY_STEPS = 30
FILESYSTEMS = ("lustre-a", "lustre-b")


def _iso(t: datetime) -> str:
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")  # sorts as text


class FleetLoad:
    """A cluster of `nodes` nodes, every node in one running job, at the documented rates."""

    ECC_PER_NODE_H = 0.35
    THERMAL_PER_NODE_H = 0.05
    XID_PER_NODE_H = 0.0004
    """A fatal Xid (79) under a running job: about one an hour at 2,000 nodes."""
    NET_PER_1000_NODES_H = 180.0
    STORAGE_PER_1000_NODES_H = 70.0

    def __init__(self, nodes: int = 2000, seed: int = 45) -> None:
        self.nodes = nodes
        self.rng = random.Random(seed)
        self.node_names = [f"{CLUSTER}-node-{i:05d}" for i in range(nodes)]
        self.free = list(range(0, nodes - nodes % NODES_PER_JOB, NODES_PER_JOB))
        self.jobs: dict[str, dict[str, Any]] = {}
        self.next_job = 0
        self.seq = 0
        self.heap: list[tuple[datetime, int, str, str]] = []
        for i, _ in enumerate(self.node_names):  # health checks spread over the first 5 min
            self._push(T0 + timedelta(seconds=HEALTH_EVERY_S * i / nodes), "health", str(i))
        for kind, rate in (("ecc", self.ECC_PER_NODE_H * nodes),
                           ("thermal", self.THERMAL_PER_NODE_H * nodes),
                           ("xid", self.XID_PER_NODE_H * nodes),
                           ("net", self.NET_PER_1000_NODES_H * nodes / 1000),
                           ("storage", self.STORAGE_PER_1000_NODES_H * nodes / 1000)):
            self._push(T0 + self._gap(rate), kind, "")
        self.pending: list[dict[str, Any]] = []
        while self.free:  # every node busy from the start, jobs part-way through their run
            self.pending += self._start(T0, part_way=True)

    def _gap(self, per_hour: float) -> timedelta:
        return timedelta(seconds=self.rng.expovariate(per_hour / 3600)) if per_hour else \
            timedelta(days=3650)

    def _push(self, at: datetime, kind: str, ref: str) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (at, self.seq, kind, ref))

    def _id(self, prefix: str) -> str:
        self.seq += 1
        return f"{prefix}-{self.seq}"

    def _start(self, at: datetime, job: str | None = None, attempt: int = 1,
               part_way: bool = False, step: int = 0) -> list[dict[str, Any]]:
        first = self.free.pop(0)
        nodes = [self.node_names[first + k] for k in range(NODES_PER_JOB)]
        out: list[dict[str, Any]] = []
        if job is None:
            job = f"fleet-job-{self.next_job}"
            self.next_job += 1
            out.append({"id": self._id("submit"), "type": "job.submitted", "time": _iso(at),
                        "project": f"proj-{self.next_job % 20}", "cluster": CLUSTER,
                        "job_id": job, "attributes": {"user": f"user-{self.next_job % 50}",
                                                      "queue": "gpu",
                                                      "gpus": NODES_PER_JOB * 8,
                                                      "mounts": [f"{FILESYSTEMS[0]}:/data"]}})
        run = self.rng.uniform(3600, 10800) * (self.rng.random() if part_way else 1.0)
        project = f"proj-{int(job.rsplit('-', 1)[1]) % 20}"
        self.jobs[job] = {"nodes": nodes, "first": first, "end": at + timedelta(seconds=run),
                          "attempt": attempt, "step": step, "project": project}
        out.append({"id": self._id("start"), "type": "job.started", "time": _iso(at),
                    "project": project, "cluster": CLUSTER, "job_id": job, "attempt": attempt,
                    "attributes": {"nodes": nodes, "gpus": NODES_PER_JOB * 8}})
        if step:
            out.append({"id": self._id("restore"), "type": "checkpoint.restored",
                        "time": _iso(at + timedelta(seconds=30)), "project": project,
                        "cluster": CLUSTER, "job_id": job, "attempt": attempt,
                        "attributes": {"step": step, "path": f"/ckpt/{job}/{step}"}})
        self._push(at + timedelta(seconds=self.rng.uniform(1, STEP_EVERY_S)), "step", job)
        return out

    def _end(self, at: datetime, job: str, kind: str = "job.completed") -> dict[str, Any]:
        state = self.jobs.pop(job)
        self.free.append(state["first"])
        return {"id": self._id("end"), "type": kind, "time": _iso(at),
                "project": state["project"], "cluster": CLUSTER, "job_id": job,
                "attempt": state["attempt"], **({"severity": "error", "message":
                                                 "NCCL watchdog timeout"}
                                                if kind == "job.failed" else {})}

    def _job_on(self, node: int) -> str | None:
        name = self.node_names[node]
        return next((j for j, s in self.jobs.items() if name in s["nodes"]), None)

    def _emit(self, at: datetime, kind: str, ref: str) -> list[dict[str, Any]]:
        rng = self.rng
        base = {"time": _iso(at), "cluster": CLUSTER}
        if kind == "health":
            node = self.node_names[int(ref)]
            self._push(at + timedelta(seconds=HEALTH_EVERY_S), kind, ref)
            return [{**base, "id": self._id("health"), "type": "node.health", "scope": "node",
                     "entity": node, "node": node,
                     "attributes": {"system": "all", "status": "pass", "checks": 12}}]
        if kind == "step":
            state = self.jobs.get(ref)
            if state is None:
                return []  # the attempt ended
            if at >= state["end"]:
                out = [self._end(at, ref)]
                out += self._start(at)
                return out
            state["step"] += 1
            step = state["step"]
            self._push(at + timedelta(seconds=STEP_EVERY_S * rng.uniform(0.98, 1.02)),
                       kind, ref)
            job = {**base, "project": state["project"], "job_id": ref,
                   "attempt": state["attempt"]}
            out = [{**job, "id": self._id("step"), "type": "job.step",
                    "attributes": {"step": step, "step_time_s": round(rng.uniform(0.9, 1.1), 3),
                                   "loss": round(2.0 / (1 + step / 1000), 4)}}]
            if step % CHECKPOINT_EVERY_STEPS == 0:
                out.append({**job, "id": self._id("ckpt"), "type": "checkpoint.saved",
                            "attributes": {"step": step, "path": f"/ckpt/{ref}/{step}",
                                           "duration_s": round(rng.uniform(20, 40), 1)}})
            return out
        rate = {"ecc": self.ECC_PER_NODE_H * self.nodes,
                "thermal": self.THERMAL_PER_NODE_H * self.nodes,
                "xid": self.XID_PER_NODE_H * self.nodes,
                "net": self.NET_PER_1000_NODES_H * self.nodes / 1000,
                "storage": self.STORAGE_PER_1000_NODES_H * self.nodes / 1000}[kind]
        self._push(at + self._gap(rate), kind, "")
        n = rng.randrange(self.nodes)
        node = self.node_names[n]
        gpu = str(rng.randrange(8))
        if kind == "ecc":
            return [{**base, "id": self._id("ecc"), "type": "node.ecc", "scope": "gpu",
                     "entity": f"{node}/gpu{gpu}", "node": node,
                     "attributes": {"gpu": gpu, "kind": "sbe", "count": 1}}]
        if kind == "thermal":
            return [{**base, "id": self._id("thermal"), "type": "node.thermal",
                     "scope": "gpu", "entity": f"{node}/gpu{gpu}", "node": node,
                     "severity": "warning", "attributes": {"gpu": gpu, "temperature_c": 87.0,
                                                           "limit_c": 85.0}}]
        if kind == "net":
            leaf = f"{CLUSTER}-leaf-{n // 32:03d}"
            return [{**base, "id": self._id("net"), "type": "network.link_errors",
                     "scope": "port", "entity": f"{leaf}/p{n % 32}",
                     "attributes": {"switch": leaf, "port": str(n % 32),
                                    "counter": "SymbolErrorCounter", "value": 1.0}}]
        if kind == "storage":
            fs = FILESYSTEMS[n % 2]
            return [{**base, "id": self._id("fs"), "type": "storage.latency",
                     "scope": "filesystem", "entity": fs,
                     "attributes": {"filesystem": fs, "latency_ms": 250.0, "op": "write"}}]
        # a fatal Xid under a running job: its ranks time out and it is requeued
        victim = self._job_on(n)
        out = [{**base, "id": self._id("xid"), "type": "node.xid", "scope": "gpu",
                "entity": f"{node}/gpu{gpu}", "node": node, "severity": "critical",
                "attributes": {"xid": 79, "gpu": gpu}}]
        if victim is None:
            return out
        state = self.jobs[victim]
        later = at + timedelta(seconds=30)
        for rank in range(NODES_PER_JOB * RANKS_PER_NODE):
            out.append({"id": self._id("nccl"), "type": "comm.nccl_timeout",
                        "time": _iso(later), "cluster": CLUSTER, "project": state["project"],
                        "job_id": victim, "attempt": state["attempt"], "severity": "error",
                        "node": state["nodes"][rank // RANKS_PER_NODE],
                        "message": "Watchdog caught collective operation timeout",
                        "attributes": {"rank": rank}})
        ended = later + timedelta(seconds=5)
        step = state["step"] - state["step"] % CHECKPOINT_EVERY_STEPS
        attempt = state["attempt"]
        failed = self._end(ended, victim, "job.failed")
        failed["time"] = _iso(ended)
        out.append(failed)
        out.append({"id": self._id("requeue"), "type": "job.requeued", "time": _iso(ended),
                    "cluster": CLUSTER, "project": state["project"], "job_id": victim,
                    "attempt": attempt, "attributes": {"reason": "NODE_FAIL"}})
        out += self._start(ended + timedelta(seconds=60), victim, attempt + 1, step=step)
        return out

    def records(self, n: int) -> list[dict[str, Any]]:
        """The next `n` records, in event-time order (ties by id)."""
        out = self.pending
        while True:
            while len(out) < n:
                at, _, kind, ref = heapq.heappop(self.heap)
                out += self._emit(at, kind, ref)
            out.sort(key=lambda r: (r["time"], r["id"]))
            # an event's follow-ups (a failure's timeouts, its restart) come later: nothing
            # still to be emitted may sort before the last record handed out
            if not self.heap or _iso(self.heap[0][0]) > out[n - 1]["time"]:
                break
            at, _, kind, ref = heapq.heappop(self.heap)
            out += self._emit(at, kind, ref)
        self.pending = out[n:]
        return out[:n]


def events(n: int, nodes: int = 2000, seed: int = 45,
           load: type[FleetLoad] = FleetLoad) -> list[Any]:
    """`n` canonical events of the mix (decoded as ingest decodes them); `load`: the mix
    with other rates (a subclass: a test's GPUs fail more often)."""
    import json

    from ingest.canonical import decode
    from schemas.events import Event

    text = "\n".join(json.dumps(r) for r in load(nodes, seed).records(n))
    return [e for e in decode(text, producer="bench", observed_at=T0) if isinstance(e, Event)]
