"""Generating ground-truth failure stories (jobs, the injected fault and its cascade, red
herrings, the truth) and the delivery orders they arrive in (see `bench.stories`)."""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from jobtrail.learn import sample
from schemas.events import Event, Source
from schemas.registry import REGISTRY

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
PROJECT = "llm-pretrain"
HORIZON = timedelta(hours=6)
CLASSES = ("gpu_hardware", "network", "storage_io", "node_failure", "oom", "code_error",
           "preemption")
OWNER = {"gpu_hardware": "hardware-ops", "network": "network", "storage_io": "storage",
         "node_failure": "hardware-ops", "oom": f"project:{PROJECT}",
         "code_error": f"project:{PROJECT}", "preemption": "platform"}


@dataclass(frozen=True)
class Truth:
    klass: str
    entity: str
    owner: str
    jobs: tuple[str, ...]
    lost_gpu_hours: float | None = None
    recovery: str = ""


@dataclass
class Story:
    seed: int
    klass: str
    events: list[tuple[str, Event]] = field(default_factory=list)
    truth: list[Truth] = field(default_factory=list)
    herrings: list[str] = field(default_factory=list)

    def add(self, source: str, type_: str, at: datetime, **fields: Any) -> Event:
        attributes = fields.pop("attributes", {})
        natural = json.dumps([self.seed, type_, at.isoformat(), fields, attributes],
                             sort_keys=True, default=str)
        digest = hashlib.sha256(natural.encode()).hexdigest()[:16]
        job = fields.get("job_id")
        event = Event(id=f"s{self.seed}-{digest}", type=type_,
                      source=Source(REGISTRY[type_].source), time=at, cluster=sample.CLUSTER,
                      project=PROJECT if job else "", observed_at=at, attributes=attributes,
                      **fields)
        self.events.append((source, event))
        return event


def node(n: int) -> str:
    return f"node-{n:03d}"


def port(n: int) -> str:
    """The rail-0 leaf port of node n on the sample fat tree."""
    return f"leaf-{2 * ((n - 1) // 16) + 1:02d}/p{(n - 1) % 16 + 1}"


@dataclass
class _Job:
    name: str
    nodes: list[int]
    start: datetime
    step_every: timedelta
    ckpt_every: int  # steps

    @property
    def gpus(self) -> int:
        return 8 * len(self.nodes)


def _run(story: Story, job: _Job, attempt: int, start: datetime, until: datetime,
         first_step: int = 0, restored: int | None = None) -> tuple[int, datetime | None,
                                                                     datetime | None]:
    """Progress of one attempt from `start` to `until`; returns (last step, its time, last
    checkpoint time)."""
    story.add("slurmctld", "job.started", start, job_id=job.name, attempt=attempt,
              attributes={"nodes": [node(n) for n in job.nodes], "gpus": job.gpus,
                          "mounts": ["lustre-scratch:/scratch"]})
    at = start + timedelta(seconds=90)
    if restored is not None:
        story.add("training", "checkpoint.restored", at, job_id=job.name, attempt=attempt,
                  attributes={"step": restored, "path": f"/ckpt/{job.name}/{restored}"})
        at += timedelta(seconds=60)
    step, last_at, ckpt_at = first_step, None, None
    for _ in range(400):  # bounded: a story is a few hours
        if at >= until:
            break
        step += 10
        story.add("training", "job.step", at, job_id=job.name, attempt=attempt,
                  entity="rank-0", attributes={"step": step})
        last_at = at
        if step % job.ckpt_every == 0:
            ckpt_at = at + timedelta(seconds=5)
            story.add("training", "checkpoint.saved", ckpt_at, job_id=job.name,
                      attempt=attempt, attributes={"step": step,
                                                   "path": f"/ckpt/{job.name}/{step}"})
        at += job.step_every
    return step, last_at, ckpt_at


def _jobs(rng: random.Random) -> list[_Job]:
    racks = rng.sample(range(4), 3)
    jobs = []
    for i, rack in enumerate(racks[:rng.randint(1, 3)]):
        first = rack * 16 + 1 + rng.randrange(0, 8)
        size = rng.choice((2, 4, 8))
        jobs.append(_Job(f"job-{i}", list(range(first, first + size)),
                         T0 + timedelta(minutes=rng.randint(0, 10)),
                         timedelta(seconds=rng.choice((180, 240, 300))),
                         rng.choice((50, 100))))
    return jobs


def generate(seed: int, klass: str | None = None) -> Story:
    """One story; `klass` forces the injected fault's class."""
    rng = random.Random(seed)
    klass = klass or rng.choice(CLASSES)
    story = Story(seed, klass)
    jobs = _jobs(rng)
    victim = jobs[0]
    fault_at = victim.start + timedelta(minutes=rng.randint(35, 70), seconds=rng.randint(0, 59))
    for other in jobs[1:]:
        _run(story, other, 1, other.start, fault_at + timedelta(minutes=90))
        story.add("slurmctld", "job.completed", fault_at + timedelta(minutes=90),
                  job_id=other.name, attempt=1, attributes={"exit_code": 0})
    step, _, ckpt_at = _run(story, victim, 1, victim.start, fault_at)
    culprit = rng.choice(victim.nodes)
    gpu = rng.randrange(8)
    symptom_at = fault_at + timedelta(seconds=rng.randint(20, 120))
    failed_at = symptom_at + timedelta(seconds=rng.randint(30, 180))
    entity = ""
    requeue = True
    if klass == "gpu_hardware":
        xid = rng.choice((79, 48, 94, 119))
        entity = f"{node(culprit)}/gpu{gpu}"
        story.add(f"dmesg:{node(culprit)}", "node.xid", fault_at, scope="gpu", entity=entity,
                  node=node(culprit), attributes={"xid": xid, "gpu": str(gpu)})
    elif klass == "network":
        entity = port(culprit)
        story.add("fabric", "network.port_down", fault_at, scope="port", entity=entity)
        story.add("fabric", "network.port_up", fault_at + timedelta(minutes=20), scope="port",
                  entity=entity)
    elif klass == "storage_io":
        entity = f"OST{rng.randrange(16):04d}"
        story.add("storage", "storage.io_error", fault_at, scope="target", entity=entity,
                  attributes={"target": entity, "error": "EIO"})
    elif klass == "node_failure":
        entity = node(culprit)
        story.add("slurmctld", "node.not_ready", fault_at, scope="node", entity=entity,
                  node=entity, attributes={"reason": "Not responding"})
    if klass in ("gpu_hardware", "network", "node_failure"):
        for rank_node in sorted({victim.nodes[0], culprit}):
            story.add("ranks", "comm.nccl_timeout", symptom_at, job_id=victim.name, attempt=1,
                      node=node(rank_node), attributes={"rank": 8 * victim.nodes.index(
                          rank_node)})
        message = "NCCL watchdog timeout"
    elif klass == "storage_io":
        story.add("ranks", "job.worker_exited", symptom_at, job_id=victim.name, attempt=1,
                  node=node(culprit), message="OSError: [Errno 5] Input/output error",
                  attributes={"exit_code": 1})
        message = "Input/output error"
    elif klass == "oom":
        symptom_at = fault_at
        story.add("ranks", "job.oom", symptom_at, job_id=victim.name, attempt=1,
                  node=node(culprit), message="torch.OutOfMemoryError: CUDA out of memory",
                  attributes={"exit_code": 1})
        message = "CUDA out of memory"
        requeue = False
    elif klass == "code_error":
        symptom_at = fault_at
        story.add("ranks", "job.worker_exited", symptom_at, job_id=victim.name, attempt=1,
                  node=node(culprit), message="Segmentation fault (core dumped)",
                  attributes={"exit_code": 139})
        message = "Segmentation fault"
        requeue = False
    else:  # preemption
        symptom_at = failed_at = fault_at
        message = ""
    if klass == "preemption":
        story.add("slurmctld", "job.preempted", fault_at, job_id=victim.name, attempt=1,
                  attributes={"reason": "preempted by a higher-priority job"})
    else:
        story.add("slurmctld", "job.failed", failed_at, job_id=victim.name, attempt=1,
                  message=message, attributes={"exit_code": 1, "reason": "NonZeroExitCode"})
    if klass in ("gpu_hardware", "node_failure"):
        story.add("slurmctld", "node.drained", failed_at + timedelta(seconds=30),
                  scope="node", entity=node(culprit), node=node(culprit),
                  attributes={"reason": "Kill task failed" if klass == "node_failure"
                              else "NHC: GPU error"})
    jobs_hit = (f"{PROJECT}/{victim.name}/1",)
    loss: float | None = None
    recovery = "awaiting_restart"
    if requeue:
        story.add("slurmctld", "job.requeued", failed_at + timedelta(seconds=1),
                  job_id=victim.name, attempt=1)
        restart = failed_at + timedelta(minutes=rng.randint(2, 12))
        queued = klass == "preemption" or rng.random() < 0.5
        story.add("slurmctld", "job.pending", failed_at + timedelta(seconds=2),
                  job_id=victim.name, attempt=2,
                  attributes={"reason": "Priority" if queued else "Resources"})
        spare = [n for n in range(1, 65) if n not in victim.nodes and n != culprit
                 and all(n not in j.nodes for j in jobs)]
        moved = _Job(victim.name, sorted(rng.sample(spare, len(victim.nodes))), restart,
                     victim.step_every, victim.ckpt_every)
        restored = (step // victim.ckpt_every) * victim.ckpt_every if ckpt_at else None
        resumed = restart + timedelta(seconds=150 if restored is not None else 90)
        _run(story, moved, 2, restart, restart + timedelta(minutes=60),
             first_step=restored or 0, restored=restored)
        story.add("slurmctld", "job.completed", restart + timedelta(minutes=60),
                  job_id=victim.name, attempt=2, attributes={"exit_code": 0})
        thrown = (symptom_at - (ckpt_at or victim.start)).total_seconds()
        # the GPUs stay held until the scheduler releases them (the pending mark)
        released = failed_at + timedelta(seconds=2) if queued else restart
        held = 0.0 if klass == "preemption" else (released - symptom_at).total_seconds()
        overhead = 0.0 if klass == "preemption" else (resumed - restart).total_seconds()
        loss = round(victim.gpus * (thrown + held + overhead) / 3600, 6)
        recovery = "verified"
    story.truth.append(Truth(klass, entity or f"{PROJECT}/{victim.name}/1", OWNER[klass],
                             jobs_hit, loss, recovery))
    _herrings(story, rng, jobs, fault_at, culprit)
    story.events.sort(key=lambda se: (se[1].time, se[1].id))
    return story


def _herrings(story: Story, rng: random.Random, jobs: list[_Job], fault_at: datetime,
              culprit: int) -> None:
    busy = {n for j in jobs for n in j.nodes} | {culprit}
    idle = [n for n in range(1, 65) if n not in busy]
    if rng.random() < 0.5:  # a fault on an idle node: its own incident, no job
        n = rng.choice(idle)
        entity = f"{node(n)}/gpu{rng.randrange(8)}"
        story.add(f"dmesg:{node(n)}", "node.xid", fault_at - timedelta(minutes=rng.randint(
            5, 30)), scope="gpu", entity=entity, node=node(n),
            attributes={"xid": 79, "gpu": entity[-1]})
        story.truth.append(Truth("gpu_hardware", entity, "hardware-ops", ()))
        story.herrings.append("idle-xid")
    victim = jobs[0]
    if rng.random() < 0.4:  # a counter tick on the victim's own leaf port, minutes before
        n = rng.choice(victim.nodes)
        story.add("fabric", "network.link_errors", fault_at - timedelta(minutes=rng.randint(
            2, 8)), scope="port", entity=port(n), attributes={"symbol_errors": 2})
        story.herrings.append("near-counter-tick")
    if rng.random() < 0.3:  # planned work: a maintenance drain and reboot of an idle node
        n = rng.choice(idle)
        at = fault_at - timedelta(minutes=rng.randint(10, 40))
        story.add("slurmctld", "node.drained", at, scope="node", entity=node(n), node=node(n),
                  attributes={"reason": "maintenance: firmware update CHG-4711"})
        story.add("slurmctld", "node.not_ready", at + timedelta(minutes=5), scope="node",
                  entity=node(n), node=node(n), attributes={"reason": "Reboot ASAP"})
        story.herrings.append("planned-work")
    if rng.random() < 0.3:  # a link counter tick far from the failure on another leaf
        n = rng.choice(idle)
        story.add("fabric", "network.link_errors", fault_at - timedelta(minutes=40),
                  scope="port", entity=port(n), attributes={"symbol_errors": 3})
        story.herrings.append("far-counter-tick")


# --- delivery -------------------------------------------------------------------------------


def deliveries(story: Story, seed: int = 0) -> dict[str, list[Event]]:
    """Arrival orders of the same events."""
    rng = random.Random(seed * 7919 + story.seed)
    by_time = [e for _, e in story.events]
    sources = sorted({s for s, _ in story.events})
    order = rng.sample(sources, len(sources))
    files = [e for s in order for src, e in story.events if src == s]
    lag = {s: timedelta(seconds=rng.uniform(0, 120)) for s in sources}

    def arrival(source: str, event: Event) -> datetime:
        if source == "training":  # shipped every minute
            base = event.time.replace(second=0, microsecond=0) + timedelta(minutes=1)
            return base + lag[source]
        return event.time + lag[source]

    live = [e for _, e in sorted(story.events, key=lambda se: (arrival(*se), se[1].id))]
    return {"time": by_time, "files": files, "live": live}
