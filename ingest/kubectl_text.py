"""kubectl's human output (part of the kubernetes adapter): what people paste when they
have no `-o json`.

- `kubectl get` tables, with a prompt or the command above them, `-A` (NAMESPACE first),
  `-o wide`, `-w` (repeated rows: one event each, by natural id), the Kubeflow SDK's watch
  table (NAME STATE TIME):
  - pods: STATUS `OOMKilled` -> `job.oom`, `Evicted` -> `job.preempted`, `Error` /
    `CrashLoopBackOff` -> `job.worker_exited`; other states are not events;
  - Kubeflow jobs (pytorchjobs, tfjobs, mpijobs, ...: NAME STATE AGE): Created / Running /
    Restarting / Succeeded / Failed as the conditions of the same name; an empty STATE is
    not an event;
  - Kueue workloads (NAME QUEUE RESERVED IN ADMITTED [FINISHED] AGE, or the older
    NAME QUEUE ADMITTED BY AGE): not admitted -> `job.pending`, admitted -> `job.admitted`,
    FINISHED True -> `job.completed`;
  - batch jobs (NAME COMPLETIONS DURATION AGE): all completions -> `job.completed`;
  - events (LAST SEEN TYPE REASON OBJECT MESSAGE, the legacy LASTSEEN FIRSTSEEN COUNT NAME
    KIND SUBOBJECT TYPE REASON SOURCE MESSAGE, and their rows without the header, as
    `kubectl get events | grep x` prints them): read as Event objects.
- `kubectl describe` container blocks: read by `ingest/kubectl_states.py`.
A table states no time but its ages: a row is stamped when read (`time_source: observed`),
or read time minus its age / LAST SEEN (`relative`), or the TIME column (`line`). Ids do not
depend on the read time, so the same table pasted twice is one set of events. A row that
does not fit its header costs that row (a dead letter naming it), never the table.
"""

from __future__ import annotations

import re
from typing import Any

from ingest.base import Context, Reject, raw_evidence
from ingest.kubectl_states import container_states
from ingest.kubernetes_objects import _age, _event, job_of_pod
from ingest.redact import clip

_KUBEFLOW_STATES = {"Created": "job.submitted", "Running": "job.started",
                    "Restarting": "job.requeued", "Succeeded": "job.completed",
                    "Failed": "job.failed"}
_POD_STATES = {"OOMKilled": "job.oom", "Evicted": "job.preempted", "Error": "job.worker_exited",
               "CrashLoopBackOff": "job.worker_exited"}
_EVENT_ROW = re.compile(r"^(?P<age>\S+)\s+(?P<type>Normal|Warning)\s+(?P<reason>\S+)\s+"
                        r"(?P<object>[\w.-]+/\S+)\s+(?P<message>\S.*)$")


def _header(line: str) -> list[tuple[int, str]] | None:
    """(start, NAME) of a kubectl header's columns (multi-word: `ADMITTED BY`, `LAST SEEN`),
    when the line is one."""
    words = line.split()
    if not words or any(w != w.upper() or not re.match(r"^[A-Z()/-]+$", w) for w in words):
        return None
    if "NAME" not in words and words[:2] != ["LAST", "SEEN"] and "LASTSEEN" not in words:
        return None
    return _columns(line)


def _columns(line: str) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    i, n = 0, len(line)
    while i < n:
        if line[i] == " ":
            i += 1
            continue
        start = i
        while i < n and not (line[i] == " " and (i + 1 >= n or line[i + 1] == " ")):
            i += 1
        out.append((start, line[start:i]))
    return out


def _cut(row: str, columns: list[tuple[int, str]]) -> dict[str, str]:
    """Cells under each header column (kubectl pads with blanks; a cell starts where its
    header does, give or take the alignment)."""
    cells: dict[str, str] = {}
    starts = [s for s, _ in columns]
    for k, (start, name) in enumerate(columns):
        end = starts[k + 1] if k + 1 < len(starts) else len(row)
        cells[name] = row[start:end].strip() if start < len(row) else ""
    return cells


def is_table(text: str) -> bool:
    return any(_header(line) for line in text.splitlines()[:30]) or any(
        _EVENT_ROW.match(line.strip()) or _legacy_event(line) for line in
        text.splitlines()[:30])


def _kind(command: str, names: list[str]) -> str:
    words = command.split()
    resource = ""
    if "get" in words and words.index("get") + 1 < len(words):
        resource = words[words.index("get") + 1].lower().split(".")[0].split("/")[0]
    if resource.startswith("vcjob") or resource.startswith("vj") or "MINAVAILABLE" in names:
        return "VolcanoJob"
    if resource.startswith("rayjob") or "JOB STATUS" in names:
        return "RayJob"
    if resource in ("pods", "pod", "po") or {"READY", "RESTARTS"} <= set(names):
        return "Pod"
    if resource.startswith("workload") or "QUEUE" in names:
        return "Workload"
    if resource in ("jobs", "job") or "COMPLETIONS" in names:
        return "Job"
    if resource.startswith("event") or "REASON" in names:
        return "Event"
    if resource.endswith("jobs") or resource.endswith("job") or "STATE" in names:
        return {"tfjobs": "TFJob", "mpijobs": "MPIJob", "xgboostjobs": "XGBoostJob",
                "paddlejobs": "PaddleJob", "jaxjobs": "JAXJob"}.get(resource, "PyTorchJob")
    return ""


_NAMESPACE_FLAG = re.compile(r"(?:^|\s)(?:-n|--namespace)(?:=|\s+)?(?P<ns>[a-z0-9][a-z0-9-]{0,62})"
                             r"(?=\s|$)")
_INFRA_NAMESPACE = re.compile(r"^(?:kube-.*|.*-system|.*-operator|.*-operators|gpu-operator.*|"
                              r"nvidia-.*|network-operator|openshift-.*|cattle-.*|monitoring|"
                              r"prometheus|cert-manager|ingress-.*|istio-.*|calico-.*|tigera-.*|"
                              r"metallb-.*|longhorn-.*|rook-.*|local-path-storage|kubeflow-system)$")


# the GPU operator's and the cluster's own daemons, wherever they run (microk8s puts the
# driver daemonset in `default`)
_INFRA_POD = re.compile(r"^(?:nvidia-[\w-]*(?:daemonset|validator|exporter|operator|plugin)|"
                        r"gpu-operator|gpu-feature-discovery|nfd-(?:master|worker)|"
                        r"node-feature-discovery|calico-|coredns-|kube-(?:proxy|apiserver|"
                        r"controller-manager|scheduler)-|etcd-)")


def namespace_of(command: str) -> str:
    """The namespace a pasted `kubectl ... -n NS` / `--namespace=NS` names, else ''."""
    m = _NAMESPACE_FLAG.search(command)
    return m["ns"] if m else ""


def infrastructure(namespace: str) -> bool:
    """Whether a namespace holds the cluster's own machinery (kube-system, gpu-operator,
    network-operator, *-system, ...), not training jobs: its pods' failures are not a job's."""
    return bool(namespace) and bool(_INFRA_NAMESPACE.match(namespace))


def records(text: str, ctx: Context) -> list[dict[str, Any] | Reject]:
    """Events of every table and container block in `text`."""

    out: list[dict[str, Any] | Reject] = []
    lines = text.splitlines()
    columns: list[tuple[int, str]] | None = None
    kind, command = "", ""
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        ref = f"{ctx.origin}:{number}"
        if "kubectl" in line.split()[:3] or line.lstrip().startswith(("$ kubectl", "# kubectl")):
            command, columns = line, None
            continue
        if (head := _header(line)) is not None:
            columns = head
            kind = _kind(command, [name for _, name in head])
            continue
        if (legacy := _legacy_event(line)) is not None or (
                columns is None and (legacy := _event_row(line)) is not None):
            record = _quiet(_event(_as_event(legacy, ctx), number, ctx), legacy, line, ref)
            if record is not None:
                out.append(record)
            continue
        if columns is None:
            continue
        cells = _cut(line, columns)
        if not cells.get("NAME") and kind != "Event":
            out.append(Reject("row", "a row without a NAME under its header",
                              raw_evidence(line), ref))
            continue
        if kind == "Event":
            found = {"age": cells.get("LAST SEEN", ""), "type": cells.get("TYPE", ""),
                     "reason": cells.get("REASON", ""), "object": cells.get("OBJECT", ""),
                     "message": cells.get("MESSAGE", "")}
            record = _quiet(_event(_as_event(found, ctx), number, ctx), found, line, ref)
            if record is not None:
                out.append(record)
        elif kind:
            out.extend(_row(kind, cells, line, ctx, ref, namespace_of(command)))
    out.extend(container_states(lines, ctx))
    seen: set[str] = set()
    unique: list[dict[str, Any] | Reject] = []
    for record in out:  # `-w` repeats a row while nothing changed: one event
        key = str(record.get("id")) if isinstance(record, dict) and record.get("id") else ""
        if key and key in seen:
            continue
        seen.add(key)
        unique.append(record)
    return unique


def _quiet(record: dict[str, Any] | Reject, found: dict[str, str], line: str,
           ref: str) -> dict[str, Any] | Reject | None:
    """A Normal event with a reason jobtrail has no meaning for (Pulled, Scheduled, ...) is
    not a dead letter: it is a line skipped; a Warning one is."""
    if isinstance(record, Reject):
        if found.get("type") == "Normal" and (record.field.endswith(".reason") or "not a "
                                              "training job" in record.reason):
            return None
        return Reject(record.field, record.reason, raw_evidence(line), ref)
    record.setdefault("attributes", {})["raw"] = raw_evidence(line)
    return record


def _event_row(line: str) -> dict[str, str] | None:
    m = _EVENT_ROW.match(line.strip()) if len(line) < 8192 else None
    return m.groupdict() if m else None


def _legacy_event(line: str) -> dict[str, str] | None:
    """`LASTSEEN FIRSTSEEN COUNT NAME KIND [SUBOBJECT] TYPE REASON {SOURCE} MESSAGE`."""
    words = line.split()
    if len(words) < 8 or len(line) > 8192 or not words[2].isdigit():
        return None
    at = next((i for i in (5, 6) if i < len(words) and words[i] in ("Normal", "Warning")), None)
    if at is None or at + 2 >= len(words) or not words[at + 2].startswith("{"):
        return None
    close = next((i for i in range(at + 2, len(words)) if words[i].endswith("}")), None)
    if close is None:
        return None
    return {"age": words[0], "type": words[at], "reason": words[at + 1],
            "object": f"{words[4].lower()}/{words[3]}", "message": " ".join(words[close + 1:]),
            "source": " ".join(words[at + 2:close + 1]).strip("{} ")}


def _as_event(found: dict[str, str], ctx: Context) -> dict[str, Any]:

    kind, _, name = found["object"].partition("/")
    kinds = {"pod": "Pod", "node": "Node", "job": "Job", "workload": "Workload",
             "deployment": "Deployment", "replicaset": "ReplicaSet"}
    ago = _age(found["age"])
    when = ctx.observed_at - ago if ago is not None else ctx.observed_at
    source = found.get("source", "")
    return {"kind": "Event", "type": found["type"], "reason": found["reason"],
            "message": found["message"], "lastTimestamp": when.isoformat(), "count": 1,
            "source": {"component": source.split()[0] if source else "",
                       "host": source.split()[1] if len(source.split()) > 1 else ""},
            "involvedObject": {"kind": kinds.get(kind.lower(), kind), "name": name},
            "metadata": {"uid": f"get-{name}-{found['reason']}-{found['age']}"}}


def _row(kind: str, cells: dict[str, str], line: str, ctx: Context,
         ref: str, namespace: str = "") -> list[dict[str, Any] | Reject]:

    name = cells["NAME"]
    namespace = cells.get("NAMESPACE", "") or namespace
    if kind == "Pod" and (infrastructure(namespace) or _INFRA_POD.match(name)):
        return []  # the GPU operator's, the CNI's, kube-system's pods: not a training job
    project = ctx.project or namespace
    if not project:
        return [Reject("project", "a kubectl table names no namespace: ship it with the "
                       "project (--project) or print it with -A", raw_evidence(line), ref)]
    type_, attributes, when, source = "", {}, ctx.observed_at.isoformat(), "observed"
    out: list[dict[str, Any] | Reject] = []
    if kind == "Pod":
        status = cells.get("STATUS", "")
        type_ = _POD_STATES.get(status, "")
        attributes = {"reason": status, "restarts": cells.get("RESTARTS", "").split(" ")[0]}
        if cells.get("NODE") not in (None, "", "<none>"):
            attributes["node"] = cells["NODE"]
    elif kind == "Workload":
        admitted = cells.get("ADMITTED", "")
        if cells.get("FINISHED") == "True":
            type_ = "job.completed"
        elif admitted == "True" or cells.get("ADMITTED BY"):
            type_, attributes = "job.admitted", {"stage": "admitted"}
        else:
            type_, attributes = "job.pending", {"reason": "not admitted by Kueue yet"}
        attributes["queue"] = cells.get("QUEUE", "")
    elif kind in ("VolcanoJob", "RayJob"):
        return _batch_row(kind, cells, name, project, line, ctx)
    elif kind == "Job":
        done, _, total = cells.get("COMPLETIONS", "").partition("/")
        if done and done == total:
            type_ = "job.completed"
    else:
        state = cells.get("STATE", "") or cells.get("STATUS", "")
        type_ = _KUBEFLOW_STATES.get(state, "")
        if cells.get("TIME"):
            when, source = cells["TIME"], "line"
        elif (ago := _age(cells.get("AGE", ""))) is not None:
            # the object exists since its AGE: submitted then, whatever its state says
            created = (ctx.observed_at - ago).isoformat()
            if type_ == "job.submitted":
                when, source = created, "relative"
            else:
                out.extend(_row_record(kind, "job.submitted", name, project, {}, created,
                                       "relative", line, ctx))
    if not type_:
        return out  # a state that is not an event (Running pod, empty STATE, 0/1 ...)
    return [*out, *_row_record(kind, type_, name, project, attributes, when, source, line,
                               ctx)]


def _batch_row(kind: str, cells: dict[str, str], name: str, project: str, line: str,
               ctx: Context) -> list[dict[str, Any] | Reject]:
    """A vcjob row (NAME STATUS MINAVAILABLE RUNNINGS AGE) or a rayjob row (NAME JOB STATUS
    DEPLOYMENT STATUS START TIME END TIME AGE): submitted AGE ago, and what its status says
    at the time the row gives (START/END TIME) or when read."""
    from ingest.kubernetes_status import RAY, VOLCANO

    out: list[dict[str, Any] | Reject] = []
    if (ago := _age(cells.get("AGE", ""))) is not None:
        out.extend(_row_record(kind, "job.submitted", name, project, {},
                               (ctx.observed_at - ago).isoformat(), "relative", line, ctx))
    if kind == "VolcanoJob":
        status = cells.get("STATUS", "")
        type_ = VOLCANO.get(status, "")
        attributes: dict[str, Any] = {"phase": status}
        when, source = ctx.observed_at.isoformat(), "observed"
    else:
        status = cells.get("JOB STATUS", "")
        type_ = RAY.get(status, "")
        attributes = {"phase": status, "deployment_status": cells.get("DEPLOYMENT STATUS")}
        stamp = cells.get("END TIME") if type_ not in ("job.started", "") else \
            cells.get("START TIME")
        when, source = (stamp, "line") if stamp else (ctx.observed_at.isoformat(), "observed")
        if type_ in ("job.completed", "job.failed") and cells.get("START TIME"):
            out.extend(_row_record(kind, "job.started", name, project, attributes,
                                   cells["START TIME"], "line", line, ctx))
    if type_ == "job.pending":
        attributes["reason"] = status
    if type_:
        out.extend(_row_record(kind, type_, name, project, attributes, when, source, line,
                               ctx))
    return out


def _row_record(kind: str, type_: str, name: str, project: str, attributes: dict[str, Any],
                when: str, source: str, line: str, ctx: Context) -> list[dict[str, Any] | Reject]:

    job = ctx.job_id or (job_of_pod(name) if kind == "Pod" else name)
    record: dict[str, Any] = {
        "id": f"kubectl-{ctx.cluster}-{project}-{kind}-{name}-{type_}"
              + (f"-{when}" if source == "line" else ""),
        "type": type_, "time": when, "project": project, "job_id": job,
        "severity": "error" if type_ in ("job.oom", "job.failed", "job.preempted",
                                         "job.worker_exited") else "info",
        "message": clip(line.strip(), 500),
        "attributes": {**{k: v for k, v in attributes.items() if v}, "time_source": source,
                       "k8s_object": f"{kind}/{name}", "raw": raw_evidence(line)}}
    if kind == "Pod":
        record.update({"scope": "rank", "entity": name})
        if attributes.get("node"):
            record["node"] = attributes["node"]
    if ctx.attempt is not None:
        record["attempt"] = ctx.attempt
    return [record]
