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
from typing import Any

import yaml

from ingest import kubectl_describe, kubectl_states, kubectl_text, kubeflow_logs, kubernetes_status
from ingest import kubernetes_conditions as conditions
from ingest.base import Adapter, Context, Reject, raw_evidence
from ingest.canonical import ParseError, loads
from ingest.kubernetes_objects import _event
from ingest.redact import clip
from schemas.documents import DocumentRefused, Limits, load_yaml_all

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
        elif isinstance(item, dict) and not kind and not item.get("kind") and (
                found := _fragment_kind(item)):
            body = item if "status" in item else {"status": item}  # `status:` / `conditions:`
            out.append({"kind": found, **body})
        elif isinstance(item, dict) and kind and not item.get("kind"):
            # a fragment the shipper named (--kind): a status, or the object without kind
            body = item if "status" in item else {"status": item}
            out.append({"kind": kind, **body})
        else:
            out.append(item)
    return out


_KUEUE_CONDITIONS = {"QuotaReserved", "Admitted", "PodsReady", "Evicted", "Requeued",
                     "Preempted", "Finished", "AdmissionChecksPending"}


def _fragment_kind(item: dict[str, Any]) -> str:
    """What a fragment pasted without `kind` (from `status:` or `conditions:` down) is, when
    its conditions say it: Kueue's condition types are a Workload's."""
    status = item.get("status") if isinstance(item.get("status"), dict) else item
    conditions = status.get("conditions") if isinstance(status, dict) else None
    types = {str(c.get("type")) for c in conditions or [] if isinstance(c, dict)}
    return "Workload" if types and types <= _KUEUE_CONDITIONS | {"Deactivated"} and types & {
        "QuotaReserved", "Admitted"} else ""


_DESCRIBE = kubectl_describe.DESCRIBE
describe_events = kubectl_describe.events


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


def parse(text: str, ctx: Context) -> list[dict[str, Any] | Reject]:
    out: list[dict[str, Any] | Reject] = []
    if kubeflow_logs.recognise(text):
        return list(kubeflow_logs.records(text, ctx))  # the training operator's own log
    described = text.lstrip()[:1] not in ("{", "[") and kubectl_describe.is_node(text)
    if described:
        out.extend(kubectl_describe.node_records(text, ctx))
    if _DESCRIBE.search(text):
        objects: list[Any] = describe_events(text, ctx)
        out.extend(kubectl_states.container_states(text.splitlines(), ctx))
    elif described:
        return out  # a describe node without its Events
    elif text.lstrip()[:1] not in ("{", "[") and (kubectl_text.is_table(text)
                                                 or kubectl_states.has_states(text)):
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
