"""Kubernetes Event objects (core/v1 and events.k8s.io/v1) -> canonical events.

Accepts one Event, an EventList (`items`), or watch lines (`{"type": "ADDED", "object": ...}`,
one per line). Reasons mapped (others are dead-lettered with the reason named, so a new one
is seen, not lost):

| reason | regarding | type |
|---|---|---|
| FailedScheduling | Pod | `job.pending` (reason from the message) |
| Preempted, Preempting, Evicted | Pod | `job.preempted` |
| BackOff, Killing | Pod | `job.worker_exited` |
| OOMKilling | Pod or Node | `job.oom` (Pod) / dead letter without a job |
| NodeNotReady | Node or Pod | `node.not_ready` |

Job: the shipper's job id, else the pod name without its Kubeflow/torchrun role suffix
(`pretrain-7b-worker-3` -> `pretrain-7b`). Project: the namespace unless the shipper names
one. Time: `eventTime`, else `lastTimestamp`, else `firstTimestamp`. Id:
`k8s-<uid>-<count>`, so re-listing events gives the same ids and a repeated event (count
going up) is a new one.

Kueue Workloads, Kubeflow training jobs and Volcano PodGroups in the same input are read from
their status conditions (`ingest/kubernetes_conditions.py`).
"""

from __future__ import annotations

import json
import re
from datetime import timedelta
from typing import Any

import yaml

from ingest import kubernetes_conditions as conditions
from ingest import kubernetes_status
from ingest.base import Adapter, Context, Reject, raw_evidence
from ingest.canonical import ParseError, loads
from ingest.redact import clip
from schemas.documents import DocumentRefused, Limits, load_yaml_all

_ROLE = re.compile(r"-(?:worker|master|launcher|ps|chief|evaluator)(?:-\d+)?$")
_POD_TYPES = {
    "FailedScheduling": "job.pending",
    "Preempted": "job.preempted", "Preempting": "job.preempted", "Evicted": "job.preempted",
    "BackOff": "job.worker_exited", "Killing": "job.worker_exited", "OOMKilling": "job.oom",
}


def job_of_pod(name: str) -> str:
    return _ROLE.sub("", name)


YAML_LIMITS = Limits(max_bytes=64 * 1024 * 1024, max_depth=64, max_aliases=0, max_nodes=5_000_000)
"""`kubectl get -o yaml` never writes aliases, and an alias bomb would expand a small body
into gigabytes; the body's size is bounded by the route that received it."""


def _documents(text: str) -> list[Any]:
    """JSON, JSON lines, concatenated JSON (`kubectl get -w -o json`), or YAML / multi-document
    YAML (`kubectl get -o yaml`, `---` between documents)."""
    try:
        return [loads(text)]
    except ValueError:
        pass
    decoder = json.JSONDecoder()
    found: list[Any] = []
    at, end = 0, len(text)
    try:
        while at < end:
            while at < end and text[at].isspace():
                at += 1
            if at >= end:
                break
            value, at = decoder.raw_decode(text, at)
            found.append(value)
        return found
    except ValueError:
        pass
    try:
        docs = [d for d in load_yaml_all(text, YAML_LIMITS, "YAML") if d is not None]
    except DocumentRefused as exc:
        raise ParseError("", f"YAML aliases are not accepted (expand them): {exc}"
                         if exc.limit == "max_aliases" else str(exc)) from None
    except (yaml.YAMLError, ValueError) as exc:
        raise ParseError("", f"neither JSON, JSON lines nor YAML: {str(exc)[:200]}") from None
    if not docs or all(isinstance(d, str) for d in docs):
        raise ParseError("", "neither JSON, JSON lines nor YAML objects")
    return docs


def _objects(text: str, kind: str = "") -> list[Any]:
    if _DESCRIBE.search(text):
        return []  # a `kubectl describe`: read by describe_events
    values: list[Any] = []
    for value in _documents(text):
        values.extend(value if isinstance(value, list) else [value])
    out: list[Any] = []
    for item in values:
        if isinstance(item, dict) and "object" in item and "type" in item:
            item = item["object"]  # a watch event
        if isinstance(item, dict) and isinstance(item.get("items"), list):
            out.extend(item["items"])
        elif isinstance(item, dict) and kind and not item.get("kind"):
            # a fragment the shipper named (--kind): a status, or the object without kind
            body = item if "status" in item else {"status": item}
            out.append({"kind": kind, **body})
        else:
            out.append(item)
    return out


_DESCRIBE = re.compile(r"(?m)^Events:\s*\n\s+Type\s+Reason\s+Age\s+From\s+Message\s*$")
_AGE = re.compile(r"(?<!\d)(\d++)([dhms])")


def _age(text: str) -> timedelta | None:
    """`kubectl describe`'s Age (`2m`, `3m12s`, `10m (x3 over 20m)`: the latest)."""
    first = text.split("(")[0].strip()
    parts = _AGE.findall(first)
    if not parts or first in ("<unknown>", "<invalid>"):
        return None
    unit = {"d": 86400, "h": 3600, "m": 60, "s": 1}
    return timedelta(seconds=sum(int(n) * unit[u] for n, u in parts))


def describe_events(text: str, ctx: Context) -> list[dict[str, Any]]:
    """The Events table of `kubectl describe pod|node|job`, as Event objects. Ages are
    relative to when the table was printed: read time minus age (`time_source: relative`)."""
    name = re.search(r"(?m)^Name:\s+(\S+)", text)
    namespace = re.search(r"(?m)^Namespace:\s+(\S+)", text)
    declared = re.search(r"(?m)^Kind:\s+(\w+)", text)
    node_kind = "Node" if re.search(r"(?m)^Roles:|^Taints:", text) else (
        declared[1] if declared else "Workload" if re.search(r"(?m)^\s+Normal\s+\S+\s.*"
                                                             r"\skueue-", text) else "Pod")
    table = _DESCRIBE.search(text)
    assert table is not None
    out: list[dict[str, Any]] = []
    for n, line in enumerate(text[table.end():].splitlines()):
        if set(line.strip()) <= set("- "):
            continue
        cols = re.split(r"\s{2,}", line.strip(), maxsplit=4)
        if len(cols) < 5 or cols[0] not in ("Normal", "Warning"):
            if line and not line.startswith(" "):
                break  # the next section of describe
            continue
        kind, reason, age, source, message = cols
        ago = _age(age)
        when = ctx.observed_at - ago if ago is not None else ctx.observed_at
        out.append({"kind": "Event", "type": kind, "reason": reason, "message": message,
                    "_line": line,
                    "lastTimestamp": when.isoformat(), "count": 1, "time_source": "relative",
                    "source": {"component": source},
                    "involvedObject": {"kind": node_kind, "name": name[1] if name else "",
                                       "namespace": namespace[1] if namespace else ""},
                    "metadata": {"uid": f"describe-{name[1] if name else ''}-{reason}-{n}-"
                                        f"{age.split('(')[0].strip()}"}})
    return out


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


def pod_status(status: dict[str, Any], i: int, ctx: Context) -> list[dict[str, Any] | Reject]:
    """A Pod's `status` pasted without the object (recognised by `phase`): an eviction ->
    `job.preempted`, a container terminated OOMKilled / Error -> `job.oom` /
    `job.worker_exited` at its `finishedAt`. The pod is the shipper's job."""
    evidence = raw_evidence(status)
    if not (ctx.project and ctx.job_id):
        return [Reject(f"items[{i}]", "a Pod status without its object names no pod: ship "
                       "it with --project and --job", evidence)]
    base: dict[str, Any] = {"project": ctx.project, "job_id": ctx.job_id,
                            "severity": "error"}
    if ctx.attempt is not None:
        base["attempt"] = ctx.attempt
    out: list[dict[str, Any] | Reject] = []
    if status.get("reason") == "Evicted":
        message = str(status.get("message") or "Evicted")
        out.append({**base, "id": f"k8s-status-{ctx.job_id}-evicted-{status.get('startTime')}",
                    "type": "job.preempted", "time": ctx.observed_at.isoformat(),
                    "message": clip(message, 500),
                    "attributes": {"reason": "Evicted", "detail": clip(message, 200),
                                   "time_source": "observed", "raw": evidence}})
    for c in (status.get("containerStatuses") or []):
        for which in ("state", "lastState"):
            done = ((c or {}).get(which) or {}).get("terminated") or {}
            type_ = {"OOMKilled": "job.oom", "Error": "job.worker_exited"}.get(
                str(done.get("reason")))
            if type_ is None:
                continue
            when = done.get("finishedAt")
            out.append({**base, "id": f"k8s-status-{ctx.job_id}-{c.get('name')}-{when}",
                        "type": type_, "time": when or ctx.observed_at.isoformat(),
                        "message": f"{c.get('name')}: {done.get('reason')}",
                        "attributes": {"exit_code": done.get("exitCode"),
                                       "reason": done.get("reason"),
                                       "time_source": "line" if when else "observed",
                                       "raw": evidence}})
    return out


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


def parse(text: str, ctx: Context) -> list[dict[str, Any] | Reject]:
    from ingest import kubectl_text

    out: list[dict[str, Any] | Reject] = []
    if _DESCRIBE.search(text):
        objects: list[Any] = describe_events(text, ctx)
        out.extend(kubectl_text.container_states(text.splitlines(), ctx))
    elif text.lstrip()[:1] not in ("{", "[") and (kubectl_text.is_table(text)
                                                 or kubectl_text.has_states(text)):
        return kubectl_text.records(text, ctx)  # kubectl's human output, not YAML
    else:
        objects = _objects(text, ctx.kind)
    for i, obj in enumerate(objects):
        if isinstance(obj, dict) and (found := kubernetes_status.shape(obj)) is not None:
            out.extend(kubernetes_status.records(obj, found, i, ctx))
        elif isinstance(obj, dict) and obj.get("kind") in conditions.KINDS:
            out.extend(conditions.records(obj, i, ctx))
        elif isinstance(obj, dict) and obj.get("kind") == "Job":
            out.extend(conditions.batch_job(obj, i, ctx))
        elif isinstance(obj, dict) and not obj.get("kind") and "phase" in (
                kubernetes_status.status_of(obj)):
            out.extend(pod_status(kubernetes_status.status_of(obj), i, ctx))
        else:
            line = obj.pop("_line", "") if isinstance(obj, dict) else ""
            record = _event(obj, i, ctx)
            if isinstance(record, dict) and isinstance(obj, dict) and obj.get("time_source"):
                record.setdefault("attributes", {})["time_source"] = obj["time_source"]
            if line and isinstance(record, dict):
                record["attributes"]["raw"] = raw_evidence(line)
            if line and isinstance(record, Reject) and obj.get("type") == "Normal":
                continue  # a describe row with no meaning for a job (Pulled, a rollout's
                # Killing): that line is skipped, as in the kubectl tables
            out.append(record)
    return out


ADAPTER = Adapter("kubernetes", parse, doc="Kubernetes Events (core/v1, events.k8s.io/v1), "
                  "Kueue Workload, Kubeflow training-job and Volcano PodGroup conditions")
