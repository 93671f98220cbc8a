"""Status conditions of Kubernetes batch objects -> scheduler events (part of the kubernetes
adapter, which hands every non-Event object here).

- Kueue `Workload`: QuotaReserved=False or Admitted=False -> `job.pending` (the reason read
  from the message); QuotaReserved, Admitted -> `job.admitted` (stage); PodsReady ->
  `job.started`; Evicted -> `job.preempted` (reason Preempted, PodsReadyTimeout, ...; a
  Preempted condition of the same preemption is merged into it); Preempted alone ->
  `job.preempted`; Requeued -> `job.requeued` (False: `job.pending`, backoff); Finished ->
  `job.completed` (reason Succeeded) or `job.failed`.
- Kubeflow `PyTorchJob`, `TFJob`, `MPIJob`, `XGBoostJob`, `PaddleJob`, `JAXJob`: Created ->
  `job.submitted`, Running -> `job.started`, Restarting -> `job.requeued`, Succeeded /
  Failed -> `job.completed` / `job.failed`; one of these with status False is a state that
  ended, recorded by the condition that replaced it, and yields nothing of its own.
- Volcano `PodGroup`: Unschedulable -> `job.pending` (reason from the message), Scheduled ->
  `job.admitted` (stage `scheduled`).
(Conditions count when their status is True unless said.)

A condition with any other type or status is dead-lettered naming it. The job is the
owning training job (Kueue: the first `ownerReferences` entry; Volcano: the
`volcano.sh/job-name` annotation or the PodGroup name without its `podgroup-` prefix and uid
suffix), the project is the namespace unless the shipper names one. The attempt is the
shipper's, else Kueue's `requeueState.count + 1`, else 1. Time is the condition's
`lastTransitionTime`; ids are `k8s-<uid>-<condition>-<status>-<lastTransitionTime>`, so
re-reading the object gives the same events and a new transition is a new event.
"""

from __future__ import annotations

import re
from typing import Any

from ingest.base import Context, Reject, raw_evidence
from ingest.redact import clip

KUBEFLOW_KINDS = frozenset({"PyTorchJob", "TFJob", "MPIJob", "XGBoostJob", "PaddleJob",
                            "JAXJob"})
KINDS = KUBEFLOW_KINDS | {"Workload", "PodGroup"}

_KUBEFLOW = {"Created": "job.submitted", "Running": "job.started", "Restarting": "job.requeued",
             "Succeeded": "job.completed", "Failed": "job.failed"}
_QUOTA = re.compile(r"insufficient (?:unused )?quota for (?P<res>[\w./-]+)(?: in flavor "
                    r"(?P<flavor>[\w.-]+))?")
_VOLCANO_JOB = re.compile(r"^podgroup-|-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-"
                          r"[0-9a-f]{12}$")


def wait_reason(message: str) -> str:
    """`couldn't assign flavors to pod set worker: insufficient unused quota for
    nvidia.com/gpu in flavor h100, 256 more needed` -> `insufficient quota: nvidia.com/gpu
    (h100)`; Volcano's `3/4 tasks in gang unschedulable: pod group is not ready, 3 Pending,
    4 minAvailable` -> `gang unschedulable: 3/4 tasks`."""
    quotas = [f"{m.group('res')}" + (f" ({m.group('flavor')})" if m.group("flavor") else "")
              for m in _QUOTA.finditer(message)]
    if quotas:
        return "insufficient quota: " + ", ".join(sorted(set(quotas)))
    gang = re.search(r"(\d+/\d+) tasks in gang unschedulable", message)
    if gang:
        return f"gang unschedulable: {gang.group(1)} tasks"
    if "Insufficient" in message:
        return "; ".join(sorted(set(re.findall(r"Insufficient [\w./-]+", message))))
    return clip(message, 200) or "unknown"


def _job_of(obj: dict[str, Any], kind: str) -> str:
    meta = obj.get("metadata") or {}
    name = str(meta.get("name") or "")
    if kind == "Workload":
        owners = meta.get("ownerReferences") or []
        if owners and isinstance(owners[0], dict) and owners[0].get("name"):
            return str(owners[0]["name"])
    if kind == "PodGroup":
        annotations = meta.get("annotations") or {}
        return str(annotations.get("volcano.sh/job-name") or _VOLCANO_JOB.sub("", name))
    return name


def _map(kind: str, ctype: str, status: str, reason: str,
         conditions: dict[str, dict[str, Any]]) -> tuple[str, dict[str, Any]] | None:
    """(type, attributes) for one condition, or None when it is not mapped."""
    true = status == "True"
    if kind == "Workload":
        if ctype in ("QuotaReserved", "Admitted"):
            if true:
                stage = "quota_reserved" if ctype == "QuotaReserved" else "admitted"
                return "job.admitted", {"stage": stage}
            return "job.pending", {}
        if ctype == "PodsReady" and true:
            return "job.started", {}
        if ctype == "Evicted" and true:
            merged = conditions.get("Preempted", {})
            extra = {"preemption_reason": merged.get("reason")} if merged.get(
                "status") == "True" else {}
            return "job.preempted", {"reason": reason or "Evicted", **extra}
        if ctype == "Preempted" and true:
            evicted = conditions.get("Evicted", {})
            if evicted.get("status") == "True":
                return "merged", {}
            return "job.preempted", {"reason": reason or "Preempted"}
        if ctype == "Requeued":
            return ("job.requeued", {"reason": reason or None}) if true else ("job.pending", {})
        if ctype == "Finished" and true:
            return ("job.completed" if reason == "Succeeded" else "job.failed",
                    {"reason": reason or None})
        return None
    if kind == "PodGroup":
        if ctype == "Unschedulable" and true:
            return "job.pending", {}
        if ctype == "Scheduled" and true:
            return "job.admitted", {"stage": "scheduled"}
        return None
    type_ = _KUBEFLOW.get(ctype)
    if type_ is None:
        return None
    if not true:
        return "merged", {}  # a state that ended: the condition that replaced it says so
    return type_, ({"reason": reason} if reason and type_ in ("job.failed", "job.requeued")
                   else {})


def records(obj: dict[str, Any], i: int, ctx: Context) -> list[dict[str, Any] | Reject]:
    kind = str(obj.get("kind"))
    where = f"items[{i}]"
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    conditions = status.get("conditions")
    evidence = raw_evidence(obj)
    if not isinstance(conditions, list) or not conditions:
        return [Reject(f"{where}.status.conditions", f"{kind} without conditions", evidence)]
    job = ctx.job_id or _job_of(obj, kind)
    project = ctx.project or str(meta.get("namespace") or "")
    if not job or not project:
        return [Reject(f"{where}.metadata", f"{kind} without a name or namespace", evidence)]
    requeues = (status.get("requeueState") or {}).get("count")
    attempt = ctx.attempt or (int(requeues) + 1 if isinstance(requeues, int) else 1)
    uid = meta.get("uid") or f"{project}/{meta.get('name')}"
    queue = str((obj.get("spec") or {}).get("queueName") or (obj.get("spec") or {}).get(
        "queue") or "")
    by_type = {str(c.get("type")): c for c in conditions if isinstance(c, dict)}
    out: list[dict[str, Any] | Reject] = []
    for j, cond in enumerate(conditions):
        at = f"{where}.status.conditions[{j}]"
        if not isinstance(cond, dict):
            out.append(Reject(at, "a condition must be an object", evidence))
            continue
        ctype, cstatus = str(cond.get("type") or ""), str(cond.get("status") or "")
        reason, message = str(cond.get("reason") or ""), str(cond.get("message") or "")
        mapped = _map(kind, ctype, cstatus, reason, by_type)
        if mapped is None:
            out.append(Reject(f"{at}.type", f"no mapping for {kind} condition {ctype}="
                              f"{cstatus or '?'}", evidence))
            continue
        type_, attributes = mapped
        if type_ == "merged":
            continue  # recorded by another condition's event, see _map
        when = cond.get("lastTransitionTime") or cond.get("lastUpdateTime")
        if not when:
            out.append(Reject(f"{at}.lastTransitionTime", "missing", evidence))
            continue
        if type_ == "job.pending":
            attributes = {"reason": wait_reason(message) if message else reason or "unknown"}
        if type_ == "job.admitted" and queue:
            attributes["queue"] = queue
        attributes = {k: v for k, v in attributes.items() if v is not None}
        out.append({
            "id": f"k8s-{uid}-{ctype}-{cstatus}-{when}", "type": type_, "time": when,
            "project": project, "job_id": job, "attempt": attempt,
            "severity": "error" if type_ in ("job.failed", "job.preempted") else "info",
            "message": clip(message or f"{ctype} {reason}".strip(), 500),
            "attributes": {**attributes, "k8s_object": f"{kind}/{meta.get('name')}",
                           "k8s_condition": f"{ctype}={cstatus}", "k8s_reason": reason,
                           "raw": evidence},
        })
    return out


_BATCH = {"Complete": "job.completed", "Failed": "job.failed", "Suspended": "job.pending"}
_BATCH_PRECURSORS = ("FailureTarget", "SuccessCriteriaMet")


def batch_job(obj: dict[str, Any], i: int, ctx: Context) -> list[dict[str, Any] | Reject]:
    """A batch/v1 Job: `status.startTime` -> `job.started`; Complete -> `job.completed` at
    `status.completionTime`; Failed -> `job.failed` (reason, e.g. BackoffLimitExceeded,
    DeadlineExceeded); Suspended -> `job.pending`. FailureTarget and SuccessCriteriaMet
    (Kubernetes 1.31+) precede Failed and Complete and yield nothing of their own."""
    where = f"items[{i}]"
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    evidence = raw_evidence(obj)
    job = ctx.job_id or str(meta.get("name") or "")
    project = ctx.project or str(meta.get("namespace") or "")
    if not job or not project:
        return [Reject(f"{where}.metadata", "Job without a name or namespace", evidence)]
    uid = meta.get("uid") or f"{project}/{job}"
    attempt = ctx.attempt or 1
    base = {"project": project, "job_id": job, "attempt": attempt}
    out: list[dict[str, Any] | Reject] = []
    if status.get("startTime"):
        out.append({**base, "id": f"k8s-{uid}-started-{status['startTime']}",
                    "type": "job.started", "time": status["startTime"], "severity": "info",
                    "message": f"Job {job} started",
                    "attributes": {"k8s_object": f"Job/{job}", "raw": evidence}})
    for j, cond in enumerate(status.get("conditions") or []):
        if not isinstance(cond, dict):
            out.append(Reject(f"{where}.status.conditions[{j}]", "a condition must be an object",
                              evidence))
            continue
        ctype, cstatus = str(cond.get("type") or ""), str(cond.get("status") or "")
        if ctype in _BATCH_PRECURSORS or cstatus != "True":
            continue
        type_ = _BATCH.get(ctype)
        if type_ is None:
            out.append(Reject(f"{where}.status.conditions[{j}].type",
                              f"no mapping for Job condition {ctype}={cstatus}", evidence))
            continue
        when = (status.get("completionTime") if type_ == "job.completed" else None) or \
            cond.get("lastTransitionTime")
        if not when:
            out.append(Reject(f"{where}.status.conditions[{j}].lastTransitionTime", "missing",
                              evidence))
            continue
        reason = str(cond.get("reason") or "")
        out.append({**base, "id": f"k8s-{uid}-{ctype}-{when}", "type": type_, "time": when,
                    "severity": "error" if type_ == "job.failed" else "info",
                    "message": clip(str(cond.get("message") or f"{ctype} {reason}"), 500),
                    "attributes": {**({"reason": reason} if reason else {}),
                                   "k8s_object": f"Job/{job}",
                                   "k8s_condition": f"{ctype}={cstatus}", "raw": evidence}})
    if not out:
        out.append(Reject(f"{where}.status", "a Job with neither startTime nor a final "
                          "condition", evidence))
    return out
