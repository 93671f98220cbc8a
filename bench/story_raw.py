"""A story delivered as the sources' own files, read by the real adapters (`ingest`): the
slurmctld log and `sacct --json -D` / `squeue --json` of each cluster, each node's kernel
log (NVRM Xid, Lustre, NFS), the training output of each job on each node (Megatron's
iteration and checkpoint lines, NCCL's watchdog, tracebacks, srun's errors), the
Alertmanager webhook of the fabric's alerts, ibstat captures, the BMC's event log.

What a file does not say is what its shipper says (`jobtrail ingest --cluster --project
--job --node`): no attempt numbers, no GPU counts but sacct's TRES, no mounts."""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from bench.story_model import PROJECT, Run, Story, hostlist
from ingest.adapters import registry, run
from ingest.base import Context
from schemas.events import Event

STATE = {"completed": "COMPLETED", "failed": "FAILED", "node_fail": "NODE_FAIL",
         "preempted": "PREEMPTED", "running": "RUNNING"}


@dataclass
class RawFile:
    adapter: str
    cluster: str
    job: str
    node: str
    text: str

    @property
    def name(self) -> str:
        return "/".join(p for p in (self.cluster, self.adapter, self.job, self.node) if p)


@dataclass
class Read:
    """What the adapters made of a story's files."""

    events: list[Event] = field(default_factory=list)
    dead: Counter[str] = field(default_factory=Counter)
    """Dead letters by adapter and field (a renderer or an adapter that disagrees)."""
    skipped: Counter[str] = field(default_factory=Counter)
    """Files no adapter of this checkout reads (their adapter is missing)."""


def _epoch(at: datetime | None) -> dict[str, Any]:
    if at is None:
        return {"set": False, "infinite": False, "number": 0}
    return {"set": True, "infinite": False, "number": int(at.timestamp())}


def _record(r: Run, state: str, reason: str = "None") -> dict[str, Any]:
    return {"job_id": int(r.job), "name": f"pretrain-{r.job}", "user": "alice",
            "account": PROJECT, "partition": "gpu", "cluster": r.cluster,
            "restart_cnt": r.attempt - 1, "state": {"current": [state], "reason": reason},
            "time": {"submission": _epoch(r.submitted),
                     "start": _epoch(r.start if state != "PENDING" else None),
                     "end": _epoch(r.end if state not in ("PENDING", "RUNNING") else None)},
            "nodes": hostlist(r.nodes) if state != "PENDING" else "None assigned",
            "exit_code": {"status": ["SUCCESS" if r.outcome == "completed" else "ERROR"],
                          "return_code": {"set": True, "infinite": False,
                                          "number": 0 if r.outcome == "completed" else 1}},
            "tres": {"allocated" if state != "PENDING" else "requested": [
                {"type": "cpu", "count": 128 * len(r.nodes)},
                {"type": "gres", "name": "gpu", "count": r.gpus}]}}


def files(story: Story) -> list[RawFile]:
    """The story's raw files, in a stable order."""
    out: list[RawFile] = []
    for (adapter, cluster, job, node), lines in sorted(story.lines.items()):
        joiner = "\n\n" if adapter == "ibstat" else "\n"
        out.append(RawFile(adapter, cluster, job, node,
                           joiner.join(t for _, _, t in sorted(lines)) + "\n"))
    for (adapter, cluster, job, node), records in sorted(story.docs.items()):
        out.append(RawFile(adapter, cluster, job, node, json.dumps({
            "version": "4", "status": "firing", "receiver": "jobtrail",
            "groupKey": "{}:{alertname=~\"IB.*\"}", "groupLabels": {},
            "commonLabels": {"cluster": cluster}, "commonAnnotations": {},
            "externalURL": "http://alertmanager.local:9093", "alerts": records}, indent=1)))
    for cluster in sorted({r.cluster for r in story.runs}):
        runs = sorted((r for r in story.runs if r.cluster == cluster),
                      key=lambda r: (r.job, r.attempt))
        # sacct --json -D: every attempt, as it ended (a requeued one REQUEUED)
        sacct = [_record(r, "REQUEUED" if r.requeued and r.outcome == "failed"
                         else STATE[r.outcome]) for r in runs]
        out.append(RawFile("slurm", cluster, "", "sacct", json.dumps({"jobs": sacct})))
        # squeue --json while the job waited for its next attempt
        for r in runs:
            for at, reason in r.pending:
                nxt = next(x for x in runs if x.job == r.job and x.attempt == r.attempt + 1)
                waiting = Run(r.cluster, r.job, nxt.attempt, nxt.nodes, at, nxt.start)
                out.append(RawFile("slurm", cluster, "", f"squeue-{r.job}-{nxt.attempt}",
                                   json.dumps({"jobs": [_record(waiting, "PENDING",
                                                                reason)]})))
    return out


def read(story: Story, order: list[RawFile]) -> Read:
    """The files through the adapters, one after another in `order`."""
    adapters = registry()
    out = Read()
    end = max(e.time for _, e in story.events) + timedelta(minutes=10)
    for f in order:
        adapter = adapters.get(f.adapter)
        if adapter is None:
            out.skipped[f.adapter] += 1
            continue
        ctx = Context(producer=f"story@{f.cluster}", observed_at=end, cluster=f.cluster,
                      project=PROJECT if f.adapter in ("slurmctld", "training-log") else "",
                      job_id=f.job, node=f.node if f.adapter != "slurm" else "",
                      origin=f.name, year=end.year)
        for decoded in run(adapter, f.text, ctx):
            if isinstance(decoded, Event):
                out.events.append(decoded)
            else:
                out.dead[f"{f.adapter}:{getattr(decoded, 'field', '')}"] += 1
    return out


def shuffled(story: Story, seed: int = 0) -> list[RawFile]:
    """The files in a shuffled order (a person importing them one by one)."""
    every = files(story)
    random.Random(seed * 104729 + story.seed).shuffle(every)
    return every
