"""A story with a missing node log and a silent rank (issue 46).

A 4-node, 4-rank job (one rank per node, the ranks placed by the scheduler) on node-001..004
of the sample cluster. Every five minutes each node's agent reports the node Ready and each
rank logs its step, except that node-003's log stops 35 minutes in (25 minutes before the
failure) and rank-2, on node-003, never logs at all. An hour in, rank 0's NCCL watchdog
fires and the attempt fails. Nothing in the cluster names a cause, so the incident is the
job's own; what the timeline lacks is exactly node-003's last 25 minutes and rank-2.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

PROJECT, JOB, CLUSTER = "llm-pretrain", "story-gaps", "cluster-a"
NODES = ["node-001", "node-002", "node-003", "node-004"]
RANKS = {"0": "node-001", "1": "node-002", "2": "node-003", "3": "node-004"}
T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
QUIET_NODE, QUIET_AFTER_MIN, SILENT_RANK = "node-003", 35, "rank-2"
FAILED_MIN = 61


def at(minutes: float) -> str:
    return (T0 + timedelta(minutes=minutes)).isoformat().replace("+00:00", "Z")


def records() -> list[dict[str, Any]]:
    job = {"cluster": CLUSTER, "project": PROJECT, "job_id": JOB, "attempt": 1}
    out: list[dict[str, Any]] = [
        {**job, "type": "job.started", "time": at(0),
         "attributes": {"nodes": NODES, "gpus": 4, "ranks": RANKS}}]
    for minute in range(0, 60, 5):
        for node in NODES:
            if node == QUIET_NODE and minute > QUIET_AFTER_MIN:
                continue
            out.append({"type": "node.ready", "time": at(minute), "cluster": CLUSTER,
                        "scope": "node", "entity": node, "node": node,
                        "message": f"{node} Ready", "attributes": {"reason": "heartbeat"}})
        for rank, node in RANKS.items():
            if f"rank-{rank}" == SILENT_RANK:
                continue
            out.append({**job, "type": "job.step", "time": at(minute + 1),
                        "entity": f"rank-{rank}", "node": node,
                        "attributes": {"step": 10 * (minute + 1), "step_time_s": 1.0}})
    out.append({**job, "type": "comm.nccl_timeout", "time": at(60), "entity": "rank-0",
                "node": "node-001", "severity": "error",
                "message": "[Rank 0] Watchdog caught collective operation timeout",
                "attributes": {"rank": 0}})
    out.append({**job, "type": "job.failed", "time": at(FAILED_MIN),
                "attributes": {"exit_code": 1}})
    return out


def jsonl() -> str:
    return "\n".join(json.dumps(r) for r in records()) + "\n"


def last_quiet_node_time() -> datetime:
    return T0 + timedelta(minutes=QUIET_AFTER_MIN)
