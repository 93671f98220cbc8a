"""`kubectl describe` as people paste it (part of the kubernetes adapter).

- The Events table of `describe pod|node|job|workload`, indented as pasted (the whole
  describe indented, a row under `Events:` without its header, backticks around it): Event
  objects at read time minus their Age (`time_source: relative`).
- `describe node`: its Conditions at their LastTransitionTime (`Sun, 02 Jun 2019 21:39:37
  +0000`): `Ready` False or Unknown -> `node.not_ready` (`reason` = Reason: Message);
  MemoryPressure, DiskPressure, PIDPressure True -> `node.health` (warning); a
  node-problem-detector condition that says a fault (`KernelDeadlock` True, `GpuHealthy`
  False, `NetworkUnavailable` True) -> `node.health` (failure); healthy conditions are no
  event. Its Taints: `node.kubernetes.io/unschedulable` (a cordon) -> `node.drained`; a GPU
  taint naming a fault (`nvidia.com/gpu.unhealthy`, `...xid...`) -> `node.health` (gpu);
  `unreachable` / `not-ready` taints -> `node.not_ready` when no Ready condition says it.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from ingest.base import Context, raw_evidence
from ingest.kubernetes_objects import _age
from ingest.redact import clip

DESCRIBE = re.compile(r"(?m)^(?P<indent>[ \t`>]{0,12}+)Events:[ \t]*\n(?:[ \t]++Type[ \t]++"
                      r"Reason[ \t]++Age[ \t]++From[ \t]++Message[ \t]*\n)?(?=[ \t]++(?:Type|"
                      r"Normal|Warning|-{4}|<none>))")
"""The Events section of a describe: the header row may have been left out."""
_EVENT = re.compile(r"^[ \t]*+(?P<type>Normal|Warning)\s++(?P<reason>[A-Za-z]\w{0,80})\s++"
                    r"(?P<age>[\dsmhd]{1,20}(?: \(x\d{1,9} over [\dsmhd]{1,20}\))?|<unknown>|"
                    r"<invalid>)\s++(?P<source>[^\s,]{1,120}(?:, [^\s,]{1,120})?)\s++"
                    r"(?P<message>\S[^\n]{0,2000}?)`?\s*$")
_KUEUE = re.compile(r"(?m)^[^\S\n]+Normal[^\S\n]+\S+[^\S\n].*[^\S\n]kueue-")
"""A Workload's describe: its events come from kueue's controllers."""
_CONDITIONS = re.compile(r"(?m)^[ \t]*Type[ \t]+Status[ \t]+LastHeartbeatTime[ \t]+"
                         r"LastTransitionTime[ \t]+Reason[ \t]+Message[ \t]*$")
_WHEN = r"\w{3}, \d\d \w{3} \d{4} \d\d:\d\d:\d\d [+-]\d{4}"
_CONDITION = re.compile(r"^[ \t]++(?P<type>[A-Z]\w{1,80})[ \t]++(?P<status>True|False|Unknown)"
                        r"[ \t]++(?P<beat>" + _WHEN + r")[ \t]++(?P<since>" + _WHEN +
                        r")[ \t]++(?P<reason>\S{1,120})(?:[ \t]++(?P<message>\S[^\n]{0,1000}))?$")
_PRESSURE = {"MemoryPressure": "memory_pressure", "DiskPressure": "disk_pressure",
             "PIDPressure": "pid_pressure"}
_HEALTHY_WHEN_TRUE = re.compile(r"(?:Ready|Healthy|OK|Available|Up)$")
_GPU_FAULT_TAINT = re.compile(r"(?i)(?:nvidia|gpu)[\w./-]{0,80}(?:unhealthy|xid|error|fault|fail|"
                              r"ecc|fallen|lost)")


def _section(text: str, name: str) -> str:
    """The value of a top-level `Name:` field of a describe (indented as pasted)."""
    m = re.search(rf"(?m)^[ \t`]{{0,12}}{name}:[ \t]+(\S+)", text)
    return m[1] if m else ""


def events(text: str, ctx: Context) -> list[dict[str, Any]]:
    """The Events table of a describe, as Event objects."""
    table = DESCRIBE.search(text)
    if table is None:
        return []
    name, namespace = _section(text, "Name"), _section(text, "Namespace")
    declared = _section(text, "Kind")
    kind = "Node" if re.search(r"(?m)^[ \t`]{0,12}(?:Roles|Taints):", text) else (
        declared or ("Workload" if _KUEUE.search(text) else "Pod"))
    base = len(table["indent"].expandtabs())
    out: list[dict[str, Any]] = []
    for n, line in enumerate(text[table.end():].splitlines()):
        if not line.strip() or set(line.strip()) <= set("- ") or line.strip().startswith(
                "Type "):
            continue
        m = _EVENT.match(line) if len(line) < 4000 else None
        if m is None:
            if len(line) - len(line.lstrip()) <= base:
                break  # the next section of describe
            continue
        ago = _age(m["age"])
        when = ctx.observed_at - ago if ago is not None else ctx.observed_at
        source = m["source"].split(",")
        out.append({"kind": "Event", "type": m["type"], "reason": m["reason"],
                    "message": m["message"].strip(), "_line": line,
                    "lastTimestamp": when.isoformat(), "count": 1, "time_source": "relative",
                    "source": {"component": source[0],
                               "host": source[1].strip() if len(source) > 1 else ""},
                    "involvedObject": {"kind": kind, "name": name, "namespace": namespace},
                    "metadata": {"uid": f"describe-{name}-{m['reason']}-{n}-"
                                        f"{m['age'].split('(')[0].strip()}"}})
    return out


def is_node(text: str) -> bool:
    """`kubectl describe node` output (its Conditions table, its header or its rows)."""
    head = text[:200_000]
    if re.search(r"(?m)^[ \t`]{0,12}Taints:", head) and re.search(
            r"(?m)^[ \t`]{0,12}(?:Roles|Unschedulable):", head):
        return True  # its header fields, the Conditions cut off
    return bool(_CONDITIONS.search(head)) or any(
        _CONDITION.match(line) for line in head.splitlines()[:400] if len(line) < 2000)


def node_records(text: str, ctx: Context) -> list[dict[str, Any]]:
    """The events a `kubectl describe node` shows: conditions, taints (see the module)."""
    node = _section(text, "Name") or _section(text, "Hostname") or ctx.node
    out: list[dict[str, Any]] = []
    ready_read = False
    for line in text.splitlines():
        m = _CONDITION.match(line) if len(line) < 2000 else None
        if m is None:
            continue
        kind, status = m["type"], m["status"]
        detail = f"{m['reason']}: {m['message']}" if m["message"] else m["reason"]
        if kind == "Ready":
            ready_read = True
            if status == "True":
                continue
            type_, attrs = "node.not_ready", {"reason": clip(detail, 200)}
        elif kind in _PRESSURE:
            if status != "True":
                continue
            type_, attrs = "node.health", {"system": _PRESSURE[kind], "status": "warning"}
        elif kind.startswith("Deprecated"):
            continue  # node-problem-detector's containerd config advice, not a fault
        else:
            healthy_value = "True" if _HEALTHY_WHEN_TRUE.search(kind) else "False"
            if status in (healthy_value, "Unknown"):
                continue
            system = "gpu" if re.search(r"(?i)gpu|xid|nvlink|nvidia", kind) else \
                "network" if kind == "NetworkUnavailable" else kind
            type_, attrs = "node.health", {"system": system, "status": "failure",
                                           "condition": kind}
        attrs.update({"k8s_condition": f"{kind}={status}", "detail": clip(detail, 300)})
        out.append(_record(type_, node, _since(m["since"], ctx), line, attrs))
    out.extend(_taints(text, node, ready_read, ctx))
    return out


def _since(stamp: str, ctx: Context) -> tuple[str, str]:
    try:
        return datetime.strptime(stamp, "%a, %d %b %Y %H:%M:%S %z").isoformat(), "line"
    except ValueError:
        return ctx.observed_at.isoformat(), "observed"


def _taints(text: str, node: str, ready_read: bool, ctx: Context) -> list[dict[str, Any]]:
    m = re.search(r"(?m)^(?P<i>[ \t`]{0,12})Taints:[ \t]+(?P<first>\S[^\n]{0,300})"
                  r"(?P<more>(?:\n[ \t]{10,}\S[^\n]{0,300})*)", text)
    if m is None or m["first"].strip() == "<none>":
        return []
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for taint in [m["first"], *m["more"].split("\n")]:
        taint = taint.strip()
        if not taint:
            continue
        key = taint.split(":")[0].split("=")[0]
        attrs: dict[str, Any] = {"taint": taint}
        if key == "node.kubernetes.io/unschedulable":
            type_ = "node.drained"
            attrs["reason"] = "cordoned (unschedulable)"
        elif key in ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready"):
            if ready_read:
                continue  # the Ready condition says it, at its time
            type_ = "node.not_ready"
            attrs["reason"] = key.rsplit("/", 1)[1]
        elif _GPU_FAULT_TAINT.search(key):
            type_ = "node.health"
            attrs.update(system="gpu", status="failure")
        else:
            continue
        if type_ in seen:
            continue  # NoSchedule and NoExecute of one taint: one event
        seen.add(type_)
        out.append(_record(type_, node, (ctx.observed_at.isoformat(), "observed"), taint,
                           attrs))
    return out


def _record(type_: str, node: str, when: tuple[str, str], line: str,
            attrs: dict[str, Any]) -> dict[str, Any]:
    severity = {"node.not_ready": "error", "node.drained": "warning"}.get(
        type_, "error" if attrs.get("status") == "failure" else "warning")
    return {"type": type_, "time": when[0], "scope": "node", "entity": node, "node": node or None,
            "severity": severity, "message": clip(line.strip(), 500),
            "attributes": {**attrs, "time_source": when[1], "raw": raw_evidence(line)}}
