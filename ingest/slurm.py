"""Slurm `sacct --json` and `squeue --json` -> scheduler events.

Both commands print `{"jobs": [...]}`; field shapes moved across Slurm releases and both are
accepted: states as a string (21.08) or a list (23.02+), times as epoch numbers or
`{"set": true, "number": ...}` (23.11+), exit codes as `{"return_code": N}` or
`{"return_code": {"number": N}}`. One job record yields the events it proves:
`job.submitted`, `job.pending` (with the pending reason: Resources, Priority,
QOSMaxGRESPerUser, ReqNodeNotAvail, ...), `job.started` (nodes expanded from the hostlist),
and the terminal event of its state (COMPLETED, FAILED, NODE_FAIL, TIMEOUT, OUT_OF_MEMORY,
CANCELLED, PREEMPTED, REQUEUED). The attempt is `restart_cnt + 1`. The project is the Slurm
account unless the shipper names one. Ids are `slurm-<cluster>-<job>-<attempt>-<type>`, so
polling sacct again yields the same events.
"""

from __future__ import annotations

from typing import Any

from ingest import hostlist
from ingest.base import Adapter, Context, Reject, raw_evidence
from ingest.canonical import ParseError, loads

_TERMINAL = {
    "COMPLETED": ("job.completed", None),
    "FAILED": ("job.failed", None),
    "NODE_FAIL": ("job.failed", "NODE_FAIL"),
    "OUT_OF_MEMORY": ("job.failed", "OUT_OF_MEMORY"),
    "TIMEOUT": ("job.timeout", "TIMEOUT"),
    "CANCELLED": ("job.cancelled", None),
    "PREEMPTED": ("job.preempted", "PREEMPTED"),
    "REQUEUED": ("job.requeued", "REQUEUED"),
    "BOOT_FAIL": ("job.failed", "BOOT_FAIL"),
    "DEADLINE": ("job.timeout", "DEADLINE"),
}


def expand_hostlist(text: str, *, field: str = "nodes") -> list[str]:
    """`node-[001-003,010],gpu7` -> node-001, node-002, node-003, node-010, gpu7, within the
    limits of `ingest.hostlist` (raises its `HostlistError`, naming `field`)."""
    return hostlist.expand(text, field=field)


def _number(value: Any) -> int | None:
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value) if value > 0 else None


def _state(job: dict[str, Any]) -> tuple[str, str]:
    raw = job.get("state", job.get("job_state"))
    reason = ""
    if isinstance(raw, dict):
        reason = str(raw.get("reason") or "")
        raw = raw.get("current")
    if isinstance(raw, list):
        raw = raw[0] if raw else ""
    reason = str(job.get("state_reason") or reason or "")
    return str(raw or "").split()[0].upper() if raw else "", "" if reason == "None" else reason


def _gpus(job: dict[str, Any]) -> int | None:
    tres = job.get("tres", {})
    for entry in (tres.get("allocated") or tres.get("requested") or []) if isinstance(
            tres, dict) else []:
        if isinstance(entry, dict) and entry.get("type") == "gres" and entry.get("name") == "gpu":
            return int(entry.get("count") or 0)
    return None


def job_records(job: Any, i: int, ctx: Context) -> list[dict[str, Any] | Reject]:
    where = f"jobs[{i}]"
    if not isinstance(job, dict):
        return [Reject(where, "a job must be an object", raw_evidence(job))]
    job_id = job.get("job_id")
    if job_id is None:
        return [Reject(f"{where}.job_id", "missing", raw_evidence(job))]
    state, reason = _state(job)
    if not state:
        return [Reject(f"{where}.state", "missing", raw_evidence(job))]
    times = job.get("time", {}) if isinstance(job.get("time"), dict) else {}
    submitted = _number(times.get("submission", job.get("submit_time")))
    started = _number(times.get("start", job.get("start_time")))
    ended = _number(times.get("end", job.get("end_time")))
    attempt = int(_number(job.get("restart_cnt")) or 0) + 1
    project = ctx.project or str(job.get("account") or "")
    if not project:
        return [Reject(f"{where}.account", "no account and no project from the shipper",
                       raw_evidence(job))]
    cluster = str(job.get("cluster") or ctx.cluster)
    base = {"project": project, "cluster": cluster, "job_id": str(job_id), "attempt": attempt,
            "producer": ctx.producer}
    evidence = raw_evidence(job)
    out: list[dict[str, Any] | Reject] = []

    def add(type_: str, time: int | None, attributes: dict[str, Any], message: str,
            severity: str = "info") -> None:
        if time is None:
            out.append(Reject(f"{where}.time", f"no time for {type_} ({state})", evidence))
            return
        out.append({**base, "id": f"slurm-{cluster}-{job_id}-{attempt}-{type_}", "type": type_,
                    "time": time, "severity": severity, "message": message,
                    "attributes": {**attributes, "slurm_state": state, "raw": evidence}})

    if submitted is not None:
        add("job.submitted", submitted, {
            "user": str(job.get("user") or job.get("user_name") or ""),
            "queue": str(job.get("partition") or ""), "gpus": _gpus(job),
            "nodes_requested": _number(job.get("node_count"))},
            f"submitted {job.get('name', '')}".strip())
    if state == "PENDING":
        add("job.pending", submitted, {"reason": reason or "Unknown"},
            f"pending: {reason or 'Unknown'}")
        return out
    try:
        nodes = expand_hostlist(str(job.get("nodes") or ""), field=f"{where}.nodes")
    except hostlist.HostlistError as exc:
        return [*out, Reject(exc.field, exc.reason, evidence)]
    if started is not None and nodes and nodes != ["None assigned"]:
        add("job.started", started, {"nodes": nodes, "gpus": _gpus(job)},
            f"running on {len(nodes)} nodes")
    terminal = _TERMINAL.get(state)
    if terminal:
        code = job.get("exit_code", {})
        rc = code.get("return_code") if isinstance(code, dict) else None
        type_, why = terminal
        add(type_, ended or started, {"exit_code": _number(rc) if isinstance(rc, dict) else rc,
                                      "reason": why or reason or None},
            f"{state.lower()}" + (f": {reason}" if reason else ""),
            "info" if state == "COMPLETED" else "error")
    elif state not in ("RUNNING", "COMPLETING", "SUSPENDED", "CONFIGURING"):
        out.append(Reject(f"{where}.state", f"unknown Slurm state {state!r}", evidence))
    return out


def parse(text: str, ctx: Context) -> list[dict[str, Any] | Reject]:
    try:
        payload = loads(text)
    except ValueError as exc:
        raise ParseError("", f"not JSON: {exc}") from None
    jobs = payload.get("jobs") if isinstance(payload, dict) else None
    if not isinstance(jobs, list):
        raise ParseError("jobs", "missing or not a list (expected sacct/squeue --json)")
    return [record for i, job in enumerate(jobs) for record in job_records(job, i, ctx)]


ADAPTER = Adapter("slurm", parse, doc="Slurm sacct --json / squeue --json")
