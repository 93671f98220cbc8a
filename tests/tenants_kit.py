"""Two tenants on one cluster, for the read-isolation tests (tests/test_trust_tenants.py).

Project A (`vision`) and project B (`llm-pretrain`) run side by side under leaf-01 of a
five-node cut of the sample cluster (`topology()`) and mount one filesystem. The leaf goes
down: one shared network incident impacts both jobs, B's first (so the machine's
explanation names B's job), and both recover. Later a GPU of node-005 fails under B's second
attempt (an incident of B alone), the node is drained and back, and A's evaluation job on
that very GPU fails the same way an hour later (an incident of A alone, whose postmortem
lists the earlier incidents on its entity). While node-005 is down B's filler job holds
the other four nodes, so A's evaluation waits for the node B's incident took down. Changes
touch a node of each tenant and node-005. Both projects run a job named `nightly`.

Every identifier of B is distinctive (`llm-secret-7`, `/ckpt/llm-secret-7/...`,
`img-llm-secret:9`, 24 GPUs on three nodes), so a read of A's can be searched for them whole.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

A, B = "vision", "llm-pretrain"
A_JOB, A_EVAL, B_JOB, B_FILL = "vis-train", "vis-eval", "llm-secret-7", "llm-secret-fill"
NIGHTLY = "nightly"
"""A job name both projects use."""
A_NODES, B_NODES = ["node-001", "node-002"], ["node-003", "node-004", "node-005"]
A_GPUS, B_GPUS = 16, 24
T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)

B_MARKS = (B, B_JOB, B_FILL, "llm-secret", "/ckpt/llm-secret-7", "img-llm-secret", "llm-code-abc",
           "b-private-note", "b-private-action")
"""Strings only B's data holds: none may appear anywhere in what A reads."""

TOKENS = {
    "tok-a-viewer": (A, "user:val", "role:viewer"),
    "tok-a-commander": (A, "user:cam", "role:commander"),
    "tok-b-commander": (B, "user:bea", "role:commander"),
    "tok-ops": ("*", "user:opal", "role:admin"),
}
A_TOKENS = ("tok-a-viewer", "tok-a-commander")


def topology() -> dict[str, Any]:
    """node-001..005 of the sample cluster (all under leaf-01 and leaf-02, 8 GPUs each)."""
    from jobtrail.learn import sample

    full = sample.topology()
    return {**full, "nodes": {n: full["nodes"][n] for n in A_NODES + B_NODES}}


def when(minutes: float, seconds: float = 0) -> str:
    return (T0 + timedelta(minutes=minutes, seconds=seconds)).isoformat().replace("+00:00", "Z")


def _job(type_: str, minutes: float, project: str, job: str, attempt: int,
         seconds: float = 0, **fields: Any) -> dict[str, Any]:
    return {"type": type_, "time": when(minutes, seconds), "cluster": "cluster-a",
            "project": project, "job_id": job, "attempt": attempt, **fields}


def _infra(type_: str, minutes: float, seconds: float = 0, **fields: Any) -> dict[str, Any]:
    return {"type": type_, "time": when(minutes, seconds), "cluster": "cluster-a", **fields}


def _run(project: str, job: str, nodes: list[str], gpus: int, *, image: str, code: str,
         mount: str, ckpt: str, steps: tuple[int, int, int], start: float,
         submitted: float, reason: str) -> Iterator[dict[str, Any]]:
    """Submitted, pending, started, progress and a checkpoint (attempt 1)."""
    first, saved, last = steps
    yield _job("job.submitted", submitted, project, job, 1,
               attributes={"queue": "gpu", "gpus": gpus, "image": image, "code_version": code,
                           "mounts": [mount]})
    yield _job("job.pending", submitted, project, job, 1, attributes={"reason": reason})
    yield _job("job.started", start, project, job, 1,
               attributes={"nodes": nodes, "gpus": gpus, "image": image, "mounts": [mount]})
    yield _job("job.step", start + 1, project, job, 1, entity="rank-0",
               attributes={"step": first, "step_time_s": 1.0})
    yield _job("checkpoint.saved", start + 2 + (project == B), project, job, 1,
               attributes={"step": saved, "path": f"{ckpt}/{saved}", "duration_s": 5 + 2 * (
                   project == B)})
    yield _job("job.step", start + 4, project, job, 1, seconds=30 * (project == B),
               entity="rank-0", attributes={"step": last, "step_time_s": 1.0})


def _recover(project: str, job: str, nodes: list[str], gpus: int, *, mount: str, ckpt: str,
             saved: int, start: float, past: int, until: float) -> Iterator[dict[str, Any]]:
    """Attempt 2 restores the checkpoint, passes the failure step and keeps stepping every
    ten minutes until `until` (no hang of its own)."""
    yield _job("job.started", start, project, job, 2,
               attributes={"nodes": nodes, "gpus": gpus, "mounts": [mount]})
    yield _job("checkpoint.restored", start + 1, project, job, 2,
               attributes={"step": saved, "path": f"{ckpt}/{saved}"})
    yield _job("job.step", start + 2, project, job, 2, entity="rank-0",
               attributes={"step": saved + 1, "step_time_s": 1.0})
    for n, minute in enumerate(range(int(start) + 10, int(until), 10)):
        yield _job("job.step", minute, project, job, 2, entity="rank-0",
                   attributes={"step": past + 10 * n, "step_time_s": 1.0})


def records() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        _infra("change.applied", -30, scope="node", entity="node-001", node="node-001",
               attributes={"kind": "firmware", "before": "1.0", "after": "1.1",
                           "ticket": "CHG-A1"}),
        _infra("change.applied", -29, scope="node", entity="node-003", node="node-003",
               attributes={"kind": "driver", "before": "550", "after": "560",
                           "ticket": "CHG-B1"}),
        *_run(A, A_JOB, A_NODES, A_GPUS, image="img-vision:1", code="vis-code-1",
              mount="lustre-scratch:/vision", ckpt="/ckpt/vis-train", steps=(10, 20, 40),
              start=0, submitted=-10, reason="Resources"),
        *_run(B, B_JOB, B_NODES, B_GPUS, image="img-llm-secret:9", code="llm-code-abc",
              mount="lustre-scratch:/llm-secret-data", ckpt="/ckpt/llm-secret-7",
              steps=(100, 300, 450), start=0, submitted=-20, reason="Priority"),
        # the leaf goes down: B's watchdog fires first, then A's
        _infra("network.port_down", 5, scope="switch", entity="leaf-01",
               message="leaf-01 rebooted"),
        _job("comm.nccl_timeout", 5, B, B_JOB, 1, seconds=30, node="node-003",
             severity="error", message=f"{B_JOB} rank 0 watchdog", attributes={"rank": 0}),
        _job("comm.nccl_timeout", 5, A, A_JOB, 1, seconds=40, node="node-001",
             severity="error", attributes={"rank": 0}),
        _job("job.failed", 6, B, B_JOB, 1, attributes={"exit_code": 1}),
        _job("job.failed", 6, A, A_JOB, 1, seconds=5, attributes={"exit_code": 1}),
        _job("job.requeued", 6, B, B_JOB, 1, seconds=10),
        _job("job.requeued", 6, A, A_JOB, 1, seconds=15),
        *_recover(A, A_JOB, A_NODES, A_GPUS, mount="lustre-scratch:/vision",
                  ckpt="/ckpt/vis-train", saved=20, start=10, past=60, until=40),
        _job("job.completed", 40, A, A_JOB, 2, attributes={"exit_code": 0}),
        *_recover(B, B_JOB, B_NODES, B_GPUS, mount="lustre-scratch:/llm-secret-data",
                  ckpt="/ckpt/llm-secret-7", saved=300, start=13, past=500, until=60),
        # a GPU of node-005 fails under B's second attempt: B's incident alone
        _infra("node.xid", 60, scope="gpu", entity="node-005/gpu3", node="node-005",
               severity="critical", message="NVRM: Xid 79, GPU has fallen off the bus",
               attributes={"xid": 79, "gpu": "3"}),
        _job("job.worker_exited", 60, B, B_JOB, 2, seconds=5, node="node-005",
             attributes={"rank": 16, "exit_code": 1}),
        _job("job.failed", 60, B, B_JOB, 2, seconds=30, attributes={"exit_code": 1}),
        _infra("node.drained", 61, scope="node", entity="node-005", node="node-005",
               attributes={"reason": "xid 79"}),
        _infra("node.ready", 100, scope="node", entity="node-005", node="node-005",
               attributes={"reason": "gpu replaced"}),
        _infra("change.applied", 50, scope="node", entity="node-005", node="node-005",
               attributes={"kind": "bios", "before": "2.0", "after": "2.1",
                           "ticket": "CHG-C1"}),
        # B fills the other four nodes while node-005 is down, so A's evaluation waits for it
        _job("job.started", 75, B, B_FILL, 1,
             attributes={"nodes": A_NODES + B_NODES[:2], "gpus": 32}),
        *(_job("job.step", minute, B, B_FILL, 1, entity="rank-0",
               attributes={"step": step}) for step, minute in enumerate(range(80, 110, 10), 1)),
        _job("job.completed", 110, B, B_FILL, 1, attributes={"exit_code": 0}),
        # A's evaluation waits, runs on node-005 and loses the same GPU later: A's alone
        _job("job.submitted", 90, A, A_EVAL, 1,
             attributes={"queue": "gpu", "gpus": 8, "image": "img-vision:1"}),
        _job("job.pending", 90, A, A_EVAL, 1, attributes={"reason": "Resources"}),
        _job("job.started", 105, A, A_EVAL, 1,
             attributes={"nodes": ["node-005"], "gpus": 8, "mounts": ["lustre-scratch:/vision"]}),
        *(_job("job.step", minute, A, A_EVAL, 1, entity="rank-0", attributes={"step": step})
          for step, minute in enumerate(range(110, 140, 10), start=1)),
        _infra("node.xid", 140, scope="gpu", entity="node-005/gpu3", node="node-005",
               severity="critical", message="NVRM: Xid 79, GPU has fallen off the bus",
               attributes={"xid": 79, "gpu": "3"}),
        _job("job.worker_exited", 140, A, A_EVAL, 1, seconds=5, node="node-005",
             attributes={"rank": 3, "exit_code": 1}),
        _job("job.failed", 140, A, A_EVAL, 1, seconds=30, attributes={"exit_code": 1}),
        # one job name in both projects: each sees its own "nightly" only
        *_nightly(A, ["node-001"], 8, 150, 3),
        *_nightly(B, ["node-002", "node-003"], 16, 152, 7),
    ]
    return out


def _nightly(project: str, nodes: list[str], gpus: int, start: float,
             steps: int) -> Iterator[dict[str, Any]]:
    yield _job("job.started", start, project, NIGHTLY, 1, attributes={"nodes": nodes,
                                                                      "gpus": gpus})
    for n in range(1, steps + 1):
        yield _job("job.step", start + n, project, NIGHTLY, 1, entity="rank-0",
                   attributes={"step": 10 * n})
    yield _job("job.completed", start + steps + 1, project, NIGHTLY, 1,
               attributes={"exit_code": 0})


def jsonl() -> bytes:
    return ("\n".join(json.dumps(r) for r in records()) + "\n").encode()


def foreign_marks(text: str) -> list[str]:
    """B's identifiers found in `text` (one of A's answers, serialised whole)."""
    return [m for m in B_MARKS if m in text]
