"""One Kubernetes Event object -> a canonical event (the reason mapping, pod -> job, kubectl's
ages, Kueue Workload events): shared by the kubernetes adapter and its kubectl text reader."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from ingest import kubernetes_conditions as conditions
from ingest.base import Context, Reject, raw_evidence
from ingest.redact import clip

_ROLE = re.compile(r"-(?:worker|master|launcher|ps|chief|evaluator)(?:-\d+)?$")
_POD_TYPES = {
    "FailedScheduling": "job.pending",
    "Preempted": "job.preempted", "Preempting": "job.preempted", "Evicted": "job.preempted",
    "BackOff": "job.worker_exited", "Killing": "job.worker_exited", "OOMKilling": "job.oom",
}


def job_of_pod(name: str) -> str:
    return _ROLE.sub("", name)



_AGE = re.compile(r"(?<!\d)(\d++)([dhms])")


def _age(text: str) -> timedelta | None:
    """`kubectl describe`'s Age (`2m`, `3m12s`, `10m (x3 over 20m)`: the latest)."""
    first = text.split("(")[0].strip()
    parts = _AGE.findall(first)
    if not parts or first in ("<unknown>", "<invalid>"):
        return None
    unit = {"d": 86400, "h": 3600, "m": 60, "s": 1}
    return timedelta(seconds=sum(int(n) * unit[u] for n, u in parts))


def kube_eventer(body: dict[str, Any]) -> dict[str, Any]:
    """kube-eventer's webhook body (its documented template: `EventType`, `EventKind`,
    `EventObject`, `EventNamespace`, `EventReason`, `EventTime` as Go prints a time,
    `EventMessage`) as the Event it was made from."""
    when = str(body.get("EventTime") or "")
    if when.endswith(" UTC") and " +0000" in when:
        when = when.replace(" +0000 UTC", "+00:00").replace(" ", "T", 1)
    name, namespace = str(body.get("EventObject") or ""), str(body.get("EventNamespace") or "")
    return {"kind": "Event", "type": body.get("EventType"), "reason": body.get("EventReason"),
            "message": body.get("EventMessage"), "lastTimestamp": when or None,
            "involvedObject": {"kind": body.get("EventKind"), "name": name,
                               "namespace": namespace},
            "metadata": {"uid": f"kube-eventer-{namespace}-{name}-{body.get('EventReason')}-"
                                f"{when}"}}


def _event(obj: Any, i: int, ctx: Context) -> dict[str, Any] | Reject:
    where = f"items[{i}]"
    if isinstance(obj, dict) and "EventReason" in obj and "kind" not in obj:
        obj = kube_eventer(obj)
    if not isinstance(obj, dict) or obj.get("kind", "Event") != "Event":
        return Reject(f"{where}.kind", "not a Kubernetes Event", raw_evidence(obj))
    regarding = obj.get("regarding") or obj.get("involvedObject") or {}
    reason = str(obj.get("reason") or "")
    message = str(obj.get("note") or obj.get("message") or reason)
    kind = str(regarding.get("kind") or "")
    name = str(regarding.get("name") or "")
    meta = obj.get("metadata") or {}
    time = obj.get("eventTime") or obj.get("lastTimestamp") or obj.get("firstTimestamp") \
        or meta.get("creationTimestamp")
    if not time:
        return Reject(f"{where}.eventTime", "no eventTime, lastTimestamp or firstTimestamp",
                      raw_evidence(obj))
    series = obj.get("series") or {}
    count = series.get("count") or obj.get("count") or 1
    uid = meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}"
    severity = "warning" if obj.get("type") == "Warning" else "info"
    record: dict[str, Any] = {
        "id": f"k8s-{uid}-{count}", "time": time, "severity": severity,
        "message": clip(message, 500),
        "attributes": {"k8s_reason": reason, "k8s_object": f"{kind}/{name}", "count": count,
                       "raw": raw_evidence(obj)},
    }
    if reason == "NodeNotReady":
        node = name if kind == "Node" else str(obj.get("source", {}).get("host") or "")
        if not node:
            return Reject(f"{where}.regarding.name", "NodeNotReady without a node",
                          raw_evidence(obj))
        record.update({"type": "node.not_ready", "scope": "node", "entity": node,
                       "node": node})
        record["attributes"]["reason"] = clip(message, 200)
        return record
    if kind == "Workload":
        return _workload_event(record, obj, reason, message, name, where, ctx)
    type_ = _POD_TYPES.get(reason)
    if type_ is None:
        return Reject(f"{where}.reason", f"no mapping for reason {reason!r}", raw_evidence(obj))
    if reason == "Killing" and not (_ROLE.search(name) or (ctx.job_id and name.startswith(
            ctx.job_id))):
        # the kubelet stops containers for rollouts, scale-downs and deletions too: only a
        # training job's worker stopping is a worker exit
        return Reject(f"{where}.regarding.name", f"Killing of {name!r}: not a training job's "
                      "worker pod (no -worker-/-master-/-launcher- role, not the shipper's "
                      "job)", raw_evidence(obj))
    if kind != "Pod":
        return Reject(f"{where}.regarding.kind", f"{reason} on a {kind or 'missing kind'}: "
                      "no job to attach it to", raw_evidence(obj))
    record.update({"type": type_, "project": ctx.project or str(regarding.get("namespace")
                                                               or meta.get("namespace") or ""),
                   "job_id": ctx.job_id or job_of_pod(name), "scope": "rank", "entity": name})
    host = (obj.get("source") or {}).get("host") or obj.get("reportingInstance")
    if host and type_ != "job.pending":
        record["node"] = str(host)
    if ctx.attempt is not None:
        record["attempt"] = ctx.attempt
    if type_ == "job.pending":
        record["attributes"]["reason"] = _pending_reason(message)
    elif type_ == "job.preempted":
        record["attributes"]["reason"] = reason
    return record


_WORKLOAD_TYPES = {"Pending": "job.pending", "QuotaReserved": "job.admitted",
                   "Admitted": "job.admitted", "Preempted": "job.preempted",
                   "Finished": "job.completed"}


def _workload_event(record: dict[str, Any], obj: dict[str, Any], reason: str, message: str,
                    name: str, where: str, ctx: Context) -> dict[str, Any] | Reject:
    """A Kueue Workload's Event (describe workload): the same meaning as its conditions."""
    type_ = "job.preempted" if reason.startswith("Evicted") else _WORKLOAD_TYPES.get(reason)
    if type_ is None:
        return Reject(f"{where}.reason", f"no mapping for Workload reason {reason!r}",
                      raw_evidence(obj))
    job = ctx.job_id or name
    project = ctx.project or str((obj.get("involvedObject") or {}).get("namespace") or "")
    if not (job and project):
        return Reject(f"{where}.regarding.name", "a Workload event without the workload's "
                      "name or namespace: ship it with --project and --job", raw_evidence(obj))
    attributes = record["attributes"]
    if type_ == "job.pending":
        attributes["reason"] = conditions.wait_reason(message)
    elif type_ == "job.admitted":
        attributes["stage"] = "quota_reserved" if reason == "QuotaReserved" else "admitted"
    elif type_ == "job.preempted":
        attributes["reason"] = reason
        record["severity"] = "error"
    record.update({"type": type_, "project": project, "job_id": job})
    if ctx.attempt is not None:
        record["attempt"] = ctx.attempt
    return record


def _pending_reason(message: str) -> str:
    """`0/64 nodes are available: 8 Insufficient nvidia.com/gpu, 56 node(s) had untolerated
    taint {...}.` -> `Insufficient nvidia.com/gpu; untolerated taint`."""
    found = []
    if "Insufficient" in message:
        found.extend(sorted(set(re.findall(r"Insufficient [\w./-]+", message))))
    if "taint" in message:
        found.append("untolerated taint")
    if "didn't match" in message or "affinity" in message:
        found.append("node affinity/selector")
    if "preemption" in message and not found:
        found.append("waiting for preemption")
    return "; ".join(found) or clip(message, 200)
