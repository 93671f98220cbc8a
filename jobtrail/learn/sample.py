"""The bundled sample scenario: a 64-node pretraining job that fails once and recovers.

Attempt 1 runs on node-001..064; node-041's HCA port to leaf-05 goes down, NCCL times out
on every rank of the ring, the scheduler fails and requeues the job; node-041 is drained and
attempt 2 restarts from the last checkpoint on a replacement node. Storage latency on the
scratch filesystem, an Xid on node-041, a node event on a node the job never used, one
credential leaked into a log line (redacted at ingest) and one malformed record (dead-lettered)
make it exercise every path. `topology()` is the 2-rail fat tree it runs on.
Deterministic: the same call always yields the same records.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

PROJECT = "llm-pretrain"
CLUSTER = "cluster-a"
JOB = "job-7b-001"
T0 = datetime(2026, 11, 30, 8, 0, 0, tzinfo=UTC)
NODES_1 = [f"node-{i:03d}" for i in range(1, 65)]
NODES_2 = [n for n in NODES_1 if n != "node-041"] + ["node-065"]
GPUS_PER_NODE = 8
MOUNTS = ["lustre-scratch:/lustre/scratch/llm-pretrain", "ckpt-store:/ckpt/llm-pretrain"]
CHECKPOINT_DIR = "/ckpt/llm-pretrain/job-7b-001"
STEPS_PER_MIN = 50


def _iso(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


def _job(type_: str, t: datetime, attempt: int | None, **fields: Any) -> dict[str, Any]:
    record: dict[str, Any] = {"type": type_, "time": _iso(t), "project": PROJECT,
                              "cluster": CLUSTER, "job_id": JOB}
    if attempt is not None:
        record["attempt"] = attempt
    record.update(fields)
    return record


def _infra(type_: str, t: datetime, **fields: Any) -> dict[str, Any]:
    return {"type": type_, "time": _iso(t), "cluster": CLUSTER, **fields}


def _ranks(nodes: list[str]) -> dict[str, str]:
    return {str(n * GPUS_PER_NODE + g): node for n, node in enumerate(nodes)
            for g in range(GPUS_PER_NODE)}


def _progress(attempt: int, start: datetime, minutes: int, first_step: int,
              checkpoint_every: int = 10) -> list[dict[str, Any]]:
    out = []
    for minute in range(1, minutes + 1):
        t = start + timedelta(minutes=minute)
        step = first_step + minute * STEPS_PER_MIN
        out.append(_job("job.step", t, attempt, source="job", scope="rank", entity="rank-0",
                        node="node-001", message=f"step {step} loss {3.2 - step / 5000:.3f}",
                        attributes={"step": step, "step_time_s": 1.2, "samples_per_s": 850.0,
                                    "loss": round(3.2 - step / 5000, 3)}))
        if minute % checkpoint_every == 0:
            out.append(_job("checkpoint.saved", t + timedelta(seconds=20), attempt,
                            scope="path", entity=CHECKPOINT_DIR, node="node-001",
                            message=f"saved checkpoint step {step}",
                            attributes={"step": step, "path": f"{CHECKPOINT_DIR}/step-{step}",
                                        "model_version": "7b-v3", "data_version": "web-2026-10",
                                        "duration_s": 41.5}))
    return out


def records() -> list[dict[str, Any] | str]:
    """The scenario as producer records (dicts, plus one raw malformed line)."""
    out: list[dict[str, Any] | str] = []
    out.append(_job("job.submitted", T0, None, producer="slurm@cluster-a",
                    message="sbatch pretrain-7b.sh (512 GPUs)",
                    attributes={"user": "alice", "queue": "gpu-large", "priority": 100,
                                "image": "registry.local/llm/train:2026.11.2",
                                "code_version": "git:4f2a9c1", "data_version": "web-2026-10",
                                "config_hash": "cfg-9d81", "gpus": 512, "nodes_requested": 64,
                                "mounts": MOUNTS, "checkpoint_dir": CHECKPOINT_DIR}))
    out.append(_job("job.pending", T0 + timedelta(seconds=5), 1, message="waiting: Resources",
                    attributes={"reason": "Resources"}))
    out.append(_job("job.pending", T0 + timedelta(minutes=6), 1, message="waiting: Priority",
                    attributes={"reason": "Priority"}))
    start1 = T0 + timedelta(minutes=12)
    out.append(_job("job.started", start1, 1, message="attempt 1 on 64 nodes",
                    attributes={"nodes": NODES_1, "gpus": 512, "ranks": _ranks(NODES_1)}))
    out.extend(_progress(1, start1, 45, 0))
    out.append(_infra("storage.latency", start1 + timedelta(minutes=20, seconds=30),
                      source="storage", severity="warning", scope="target",
                      entity="lustre-scratch-OST0007", producer="lustre-exporter@cluster-a",
                      message="OST0007 write latency 850 ms",
                      attributes={"filesystem": "lustre-scratch", "target": "OST0007",
                                  "latency_ms": 850.0, "op": "write"}))
    out.append(_infra("node.ecc", start1 + timedelta(minutes=30), source="node",
                      severity="warning", scope="gpu", entity="node-041/gpu3", node="node-041",
                      producer="dcgm@cluster-a", message="single-bit ECC errors on GPU 3",
                      attributes={"gpu": "3", "kind": "sbe", "count": 12}))
    fail = start1 + timedelta(minutes=45, seconds=30)
    # the switch's view (needs the topology to reach the job) and the node's view
    out.append(_infra("network.link_errors", fail - timedelta(seconds=40), source="network",
                      severity="warning", scope="port", entity="leaf-05/p9",
                      producer="ufm@cluster-a", message="leaf-05 p9 symbol errors rising",
                      attributes={"counter": "symbol_errors", "value": 1840.0}))
    out.append(_infra("network.port_down", fail - timedelta(seconds=2), source="network",
                      severity="error", scope="nic", entity="node-041/mlx5_0", node="node-041",
                      producer="ib-monitor@cluster-a",
                      message="mlx5_0 port 1 state DOWN (peer leaf-05 p9)",
                      attributes={"switch": "leaf-05", "port": "p9", "peer": "node-041"}))
    for rank in range(0, 512, 8):
        node = NODES_1[rank // GPUS_PER_NODE]
        out.append(_job("comm.nccl_timeout", fail + timedelta(milliseconds=rank * 3), 1,
                        severity="error", scope="rank", entity=f"rank-{rank}", node=node,
                        message=(f"[Rank {rank}] Watchdog caught collective operation timeout: "
                                 "WorkNCCL(SeqNum=88121, OpType=ALLREDUCE) ran for 600000 ms"),
                        attributes={"rank": rank, "seq_num": 88121, "op_type": "ALLREDUCE",
                                    "timeout_ms": 600000}))
    out.append(_infra("node.xid", fail + timedelta(seconds=4), source="node", severity="critical",
                      scope="gpu", entity="node-041/gpu3", node="node-041",
                      producer="kernel@node-041",
                      message="NVRM: Xid (PCI:0000:9b:00): 79, GPU has fallen off the bus",
                      attributes={"xid": 79, "gpu": "3", "pci": "0000:9b:00"}))
    out.append(_job("job.worker_exited", fail + timedelta(seconds=20), 1, severity="error",
                    scope="rank", entity="rank-320", node="node-041",
                    message="torchrun: ChildFailedError rank 320 exitcode 1",
                    attributes={"rank": 320, "exit_code": 1, "root_cause": True}))
    out.append(_job("job.failed", fail + timedelta(seconds=30), 1, severity="error",
                    message="attempt 1 NODE_FAIL/exit 1",
                    attributes={"exit_code": 1, "reason": "NCCL watchdog timeout",
                                "failed_nodes": ["node-041"], "step": 2250}))
    out.append(_infra("node.drained", fail + timedelta(seconds=40), source="node",
                      severity="warning", scope="node", entity="node-041",
                      producer="slurm@cluster-a", message="node-041 drained: Xid 79",
                      attributes={"reason": "Xid 79"}))
    out.append(_job("job.requeued", fail + timedelta(seconds=45), 1,
                    message="requeued after NODE_FAIL", attributes={"reason": "NODE_FAIL"}))
    out.append(_job("job.pending", fail + timedelta(seconds=50), 2, message="waiting: Resources",
                    attributes={"reason": "Resources"}))
    start2 = fail + timedelta(minutes=4)
    out.append(_job("job.started", start2, 2, message="attempt 2 on 64 nodes (node-065 for 041)",
                    attributes={"nodes": NODES_2, "gpus": 512, "ranks": _ranks(NODES_2)}))
    out.append(_job("checkpoint.restored", start2 + timedelta(seconds=50), 2, scope="path",
                    entity=CHECKPOINT_DIR, node="node-001",
                    message="restored checkpoint step 2000",
                    attributes={"step": 2000, "path": f"{CHECKPOINT_DIR}/step-2000"}))
    out.extend(_progress(2, start2 + timedelta(minutes=1), 30, 2000))
    out.append(_job("job.completed", start2 + timedelta(minutes=32), 2, message="attempt 2 done",
                    attributes={"exit_code": 0, "step": 3500}))
    # a leaked credential in a log line: stored, but redacted at ingest
    out.append(_job("job.worker_exited", start2 + timedelta(minutes=32, seconds=5), 2,
                    severity="info", scope="rank", entity="rank-0", node="node-001",
                    message="uploader exited; env WANDB_API_KEY=abc123secretvalue7",
                    attributes={"rank": 0, "exit_code": 0}))
    # not this job's: stored and queryable by entity, never on its timeline
    out.append(_infra("node.not_ready", start1 + timedelta(minutes=15), source="node",
                      severity="warning", scope="node", entity="node-100",
                      message="node-100 NotReady", attributes={"reason": "KubeletDown"}))
    out.append(_infra("storage.io_error", start1 + timedelta(minutes=16), source="storage",
                      severity="error", scope="filesystem", entity="nfs-home",
                      message="nfs: server home01 not responding",
                      attributes={"filesystem": "nfs-home", "error": "not responding"}))
    out.append('{"type": "job.step", "time": "2026-11-30T09:00:00Z", "cluster": "cluster-a", '
               '"project": "llm-pretrain", "job_id": "job-7b-001", "attributes": {"step": -5}}')
    return out


def jsonl() -> str:
    import json

    return "\n".join(r if isinstance(r, str) else json.dumps(r) for r in records()) + "\n"


def synthetic(n_events: int, *, jobs: int = 50, nodes_per_job: int = 8,
              project: str = "bench", cluster: str = CLUSTER) -> list[dict[str, Any]]:
    """`n_events` canonical records for load: job starts, progress and node events.

    Every job starts first; then steps (80 %), node ECC events on the job's nodes (10 %) and
    NCCL timeouts (10 %), round-robin over jobs, one second apart per job. Ids are given,
    so benchmarks and crash tests can count exactly. Another `cluster` gets its own ids, job
    and node names (prefixed with it), so several clusters' loads never share an entity.
    """
    p = "" if cluster == CLUSTER else f"{cluster}-"
    out: list[dict[str, Any]] = []
    for j in range(jobs):
        nodes = [f"{p}node-{j * nodes_per_job + k:04d}" for k in range(nodes_per_job)]
        out.append({"id": f"{p}syn-start-{j}", "type": "job.started", "time": _iso(T0),
                    "project": project, "cluster": cluster, "job_id": f"{p}syn-job-{j}",
                    "attempt": 1, "attributes": {"nodes": nodes, "gpus": 8 * nodes_per_job}})
    i = 0
    while len(out) < n_events:
        j = i % jobs
        t = _iso(T0 + timedelta(seconds=1 + i // jobs))
        kind = i % 10
        base = {"id": f"{p}syn-{i}", "time": t, "cluster": cluster}
        if kind == 8:
            node = f"{p}node-{j * nodes_per_job + (i // jobs) % nodes_per_job:04d}"
            out.append({**base, "type": "node.ecc", "scope": "gpu", "entity": f"{node}/gpu0",
                        "node": node, "attributes": {"gpu": "0", "kind": "sbe", "count": 1}})
        elif kind == 9:
            out.append({**base, "type": "comm.nccl_timeout", "project": project,
                        "job_id": f"{p}syn-job-{j}", "attempt": 1, "severity": "error",
                        "message": "Watchdog caught collective operation timeout",
                        "attributes": {"rank": i % 64, "seq_num": i}})
        else:
            out.append({**base, "type": "job.step", "project": project,
                        "job_id": f"{p}syn-job-{j}", "attempt": 1,
                        "attributes": {"step": i, "step_time_s": 1.1}})
        i += 1
    return out[:n_events]


def topology() -> dict[str, Any]:
    """The wiring of the sample cluster (examples/topology-64.yaml is the same, as a file)."""
    from schemas.topology import fat_tree

    return fat_tree(64, cluster=CLUSTER)
