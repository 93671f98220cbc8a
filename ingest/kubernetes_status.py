"""Volcano `Job` (vcjob) and KubeRay `RayJob` status (part of the kubernetes adapter),
whole objects or a `status` pasted alone, recognised by its shape rather than a `kind`.

- Volcano (`apiVersion: batch.volcano.sh/...`, or a status with `state.phase`): Pending ->
  `job.pending`, Running -> `job.started`, Restarting -> `job.requeued`, Completed ->
  `job.completed`, Failed / Aborted / Terminated -> `job.failed`, at `state.lastTransitionTime`;
- RayJob (`kind: RayJob`, or a status with `jobStatus` / `jobDeploymentStatus`): RUNNING ->
  `job.started` at `startTime`, SUCCEEDED -> `job.completed`, FAILED -> `job.failed`, STOPPED
  -> `job.cancelled` at `endTime`; no job status yet (Initializing) -> `job.pending`.
The job is the object's name, else the shipper's job (a fragment has no name).
"""

from __future__ import annotations

from typing import Any

from ingest.base import Context, Reject, raw_evidence
from ingest.redact import clip

VOLCANO = {"Pending": "job.pending", "Running": "job.started", "Restarting": "job.requeued",
           "Completed": "job.completed", "Failed": "job.failed", "Aborted": "job.failed",
           "Terminated": "job.failed"}
RAY = {"RUNNING": "job.started", "SUCCEEDED": "job.completed", "FAILED": "job.failed",
       "STOPPED": "job.cancelled"}


def status_of(obj: dict[str, Any]) -> dict[str, Any]:
    """The object's `status`, or `obj` itself when it is one pasted alone."""
    status = obj.get("status")
    return status if isinstance(status, dict) else obj


def shape(obj: dict[str, Any]) -> str | None:
    """`VolcanoJob` or `RayJob` when `obj` (an object or its status) is one."""
    if obj.get("kind") == "RayJob":
        return "RayJob"
    if obj.get("kind") == "Job" and str(obj.get("apiVersion", "")).startswith("batch.volcano"):
        return "VolcanoJob"
    if obj.get("kind"):
        return None
    status = status_of(obj)
    if isinstance(status.get("state"), dict) and "phase" in status["state"]:
        return "VolcanoJob"
    if "jobStatus" in status or "jobDeploymentStatus" in status:
        return "RayJob"
    return None


def records(obj: dict[str, Any], kind: str, i: int, ctx: Context) -> list[dict[str, Any] | Reject]:
    meta = obj.get("metadata") or {}
    status = status_of(obj)
    evidence = raw_evidence(obj)
    job = ctx.job_id or str(meta.get("name") or "")
    project = ctx.project or str(meta.get("namespace") or "")
    if not (job and project):
        return [Reject(f"items[{i}].metadata", f"a {kind} status without its object names no "
                       "job: ship it with --project and --job", evidence)]
    if kind == "VolcanoJob":
        state = status.get("state") or {}
        phase = str(state.get("phase") or "")
        type_ = VOLCANO.get(phase)
        when = state.get("lastTransitionTime")
        attributes: dict[str, Any] = {"phase": phase, "retry_count": status.get("retryCount")}
        if type_ == "job.pending":
            attributes["reason"] = phase
    else:
        phase = str(status.get("jobStatus") or "")
        type_ = RAY.get(phase) or ("job.pending" if not phase and status.get(
            "jobDeploymentStatus") in ("Initializing", "New", "Waiting") else None)
        when = status.get("endTime") if type_ not in ("job.started", "job.pending") else \
            status.get("startTime")
        attributes = {"phase": phase or str(status.get("jobDeploymentStatus")),
                      "deployment_status": status.get("jobDeploymentStatus")}
        if type_ == "job.pending":
            attributes["reason"] = f"RayCluster {status.get('jobDeploymentStatus')}"
    if type_ is None:
        return [Reject(f"items[{i}].status", f"no mapping for {kind} phase {phase!r}",
                       evidence)]
    record: dict[str, Any] = {
        "id": f"k8s-{kind}-{project}-{job}-{type_}-{when or ''}", "type": type_,
        "time": when or ctx.observed_at.isoformat(), "project": project, "job_id": job,
        "severity": "error" if type_ == "job.failed" else "info",
        "message": clip(f"{kind} {job}: {phase or attributes['phase']}", 500),
        "attributes": {**{k: v for k, v in attributes.items() if v is not None},
                       "time_source": "line" if when else "observed",
                       "k8s_object": f"{kind}/{meta.get('name') or job}", "raw": evidence}}
    if ctx.attempt is not None:
        record["attempt"] = ctx.attempt
    return [record]
