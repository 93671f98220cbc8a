"""Prometheus Alertmanager webhook (payload version 4) -> canonical events.

One payload groups alerts; each alert becomes one event. The mapping from `alertname` to our
type, scope and entity is data (`DEFAULT_MAPPING`, overridable with a YAML file of the same
shape, see docs/adapters.md). A resolved alert maps to the entry's `resolved_type` (e.g.
`network.port_up`) or, without one, to the firing type with `attributes.resolved = true`.
Ids: `am-<fingerprint>-<startsAt>-<status>`, so redelivered webhooks are the same events, and
a resolved alert names the firing event it ends (`attributes.ends`, with `started_at`): one
signal with a start and an end, on the same entity.

Where the alert is: a filesystem alert (`storage.capacity` from node exporter series) whose
`fstype` is a local filesystem (`ext4`, `xfs`, ...: not a network one, `SHARED_FSTYPES`) is
that node's: node `{node}`, entity and filesystem `<node>:<mountpoint>`. A shared
filesystem's alert names the filesystem, not the node that happened to report it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from ingest.base import Adapter, Context, Reject, fill, json_object, raw_evidence
from ingest.canonical import ParseError
from schemas.documents import load_yaml
from schemas.registry import REGISTRY

DEFAULT_MAPPING: dict[str, dict[str, Any]] = {
    "IBPortDown": {"type": "network.port_down", "resolved_type": "network.port_up",
                   "scope": "port", "entity": "{switch}/{port}",
                   "attributes": {"switch": "{switch}", "port": "{port}"}},
    "IBLinkErrors": {"type": "network.link_errors", "scope": "port", "entity": "{switch}/{port}",
                     "attributes": {"switch": "{switch}", "port": "{port}"}},
    "NodeNotReady": {"type": "node.not_ready", "resolved_type": "node.ready", "scope": "node",
                     "entity": "{node}"},
    "GPUXidError": {"type": "node.xid", "scope": "gpu", "entity": "{node}/gpu{gpu}",
                    "node": "{node}", "attributes": {"xid": "{xid}", "gpu": "{gpu}"}},
    "GPUEccErrors": {"type": "node.ecc", "scope": "gpu", "entity": "{node}/gpu{gpu}",
                     "node": "{node}", "attributes": {"gpu": "{gpu}"}},
    # deploy/prometheus/gpu-health.rules.yml (dcgm-exporter and node exporter series)
    "GPUDoubleBitECC": {"type": "node.ecc", "scope": "gpu", "entity": "{node}/gpu{gpu}",
                        "node": "{node}", "attributes": {"gpu": "{gpu}", "kind": "dbe"}},
    "GPURowRemapFailure": {"type": "node.health", "scope": "gpu", "entity": "{node}/gpu{gpu}",
                           "node": "{node}", "attributes": {"gpu": "{gpu}", "system": "memory",
                                                            "status": "failure",
                                                            "detail": "row remap failure"}},
    "GPUThermalThrottle": {"type": "node.throttled", "scope": "gpu",
                           "entity": "{node}/gpu{gpu}", "node": "{node}",
                           "attributes": {"gpu": "{gpu}", "reason": "thermal"}},
    "GPUClockThrottle": {"type": "node.throttled", "scope": "gpu", "entity": "{node}/gpu{gpu}",
                         "node": "{node}",
                         "attributes": {"gpu": "{gpu}", "reason": "hw_slowdown"}},
    "GPUNVLinkErrors": {"type": "node.link_degraded", "scope": "gpu",
                        "entity": "{node}/gpu{gpu}", "node": "{node}",
                        "attributes": {"gpu": "{gpu}", "bus": "nvlink"}},
    "NodeFilesystemAlmostFull": {"type": "storage.capacity", "scope": "filesystem",
                                 "entity": "{filesystem}",
                                 "attributes": {"filesystem": "{filesystem}",
                                                "used_pct": "{used_pct}"}},
    "InfiniBandPortDown": {"type": "network.port_down", "resolved_type": "network.port_up",
                           "scope": "nic", "entity": "{node}/{device}", "node": "{node}",
                           "attributes": {"device": "{device}", "port": "{port}"}},
    "LustreOSTLatencyHigh": {"type": "storage.latency", "scope": "target",
                             "entity": "{filesystem}-{target}",
                             "attributes": {"filesystem": "{filesystem}", "target": "{target}",
                                            "latency_ms": "{value}"}},
    "FilesystemAlmostFull": {"type": "storage.capacity", "scope": "filesystem",
                             "entity": "{filesystem}",
                             "attributes": {"filesystem": "{filesystem}", "used_pct": "{value}"}},
}

SHARED_FSTYPES = frozenset({
    "nfs", "nfs4", "lustre", "gpfs", "beegfs", "cifs", "smb3", "smbfs", "ceph", "cephfs",
    "glusterfs", "fuse.glusterfs", "fuse.cephfs", "fuse.gcsfuse", "fuse.s3fs", "fuse.mountpoint-s3",
    "wekafs", "panfs", "orangefs", "pvfs2", "9p", "afs", "ocfs2", "gfs2", "fuse.juicefs",
    "fuse.alluxio-fuse", "fuse.weka", "dvs", "vastnfs"})
"""Network and cluster filesystems: an alert about one is the filesystem's, not the node's."""
_NODE_SCOPED = ("storage.capacity", "storage.latency", "storage.io_error")

_SEVERITY = {"critical": "critical", "page": "critical", "error": "error", "warning": "warning",
             "info": "info", "none": "info"}


def load_mapping(path: Path) -> dict[str, dict[str, Any]]:
    data = load_yaml(path.read_text(), what=str(path))
    if not isinstance(data, dict):
        raise ValueError(f"{path}: the mapping is an object keyed by alertname")
    for name, entry in data.items():
        if not isinstance(entry, dict) or entry.get("type") not in REGISTRY:
            raise ValueError(f"{path}: {name}: `type` must be a jobtrail event type")
        resolved = entry.get("resolved_type")
        if resolved is not None and resolved not in REGISTRY:
            raise ValueError(f"{path}: {name}: `resolved_type` must be a jobtrail event type")
    return data


def alert_record(alert: Any, i: int, payload: dict[str, Any], ctx: Context,
                 mapping: dict[str, dict[str, Any]], prefix: str = "am") -> dict[str, Any] | Reject:
    """One Alertmanager-shaped alert (also Grafana unified alerting's) -> a draft or a reject."""
    where = f"alerts[{i}]"
    if not isinstance(alert, dict):
        return Reject(where, "an alert must be an object", raw_evidence(alert))
    common, own = payload.get("commonLabels") or {}, alert.get("labels") or {}
    for field, value in (("commonLabels", common), (f"{where}.labels", own)):
        if not isinstance(value, dict):
            return Reject(field, "labels must be an object of name: value",
                          raw_evidence(alert))
    labels = {str(k): str(v) for k, v in {**common, **own}.items()}
    values = alert.get("values")  # Grafana unified alerting: {"B": 3, "C": 1}
    if "value" not in labels and isinstance(values, dict) and values:
        labels["value"] = str(next(iter(values.values())))
    name = labels.get("alertname")
    if not name:
        return Reject(f"{where}.labels.alertname", "missing", raw_evidence(alert))
    entry = mapping.get(name)
    if entry is None:
        return Reject(f"{where}.labels.alertname",
                      f"no mapping for alert {name!r} (add it to the mapping file)",
                      raw_evidence(alert))
    status = str(alert.get("status") or payload.get("status") or "firing")
    resolved = status == "resolved"
    annotations = {**payload.get("commonAnnotations", {}), **(alert.get("annotations") or {})}
    try:
        time = alert["endsAt"] if resolved else alert["startsAt"]
    except KeyError as exc:
        return Reject(f"{where}.{exc.args[0]}", "missing", raw_evidence(alert))
    # a value that changes while the alert fires belongs in an annotation (a label would make
    # a new alert): the mapping reads both, labels first
    values = {**{str(k): str(v) for k, v in annotations.items()}, **labels}
    try:
        attributes = fill(entry.get("attributes", {}), values, "attributes")
        entity = fill(entry.get("entity", ""), values, "entity")
        node = fill(entry.get("node", ""), values, "node")
    except ParseError as exc:
        return Reject(f"{where}.labels.{exc.field}", exc.reason, raw_evidence(alert))
    kind = entry["type"]
    fstype = labels.get("fstype", "")
    if kind in _NODE_SCOPED and fstype and fstype.lower() not in SHARED_FSTYPES \
            and not fstype.lower().startswith("fuse.") and (labels.get("node") or node):
        host = node or labels["node"]
        mount = str(attributes.get("filesystem") or labels.get("mountpoint") or entity)
        node, entity = host, f"{host}:{mount}"  # one node's /scratch is not another's
        attributes.update(node_local=True, fstype=fstype, mountpoint=mount)
        if "filesystem" in attributes:
            attributes["filesystem"] = entity
    elif fstype:
        attributes["fstype"] = fstype
    # Alertmanager's fingerprint is a hash of the label set: without one, hash the labels
    # too, so two alerts that differ in any label never collapse into one event
    fingerprint = alert.get("fingerprint") or "l" + hashlib.sha256(json.dumps(
        labels, sort_keys=True, default=str).encode()).hexdigest()[:16]
    if resolved:
        kind = entry.get("resolved_type", kind)
        if "resolved_type" not in entry:
            attributes["resolved"] = True
        # the end of the firing alert: the same fingerprint and startsAt (one signal)
        attributes.update(ends=f"{prefix}-{fingerprint}-{alert.get('startsAt')}-firing",
                          started_at=str(alert.get("startsAt") or ""))
    # the alert's state is `alert_status`; `status` is the mapping's when it says one (a
    # GPURowRemapFailure is a health `status: failure`, which "firing" must not overwrite)
    attributes.setdefault("status", status)
    attributes.update({"alertname": name, "alert_status": status,
                       "fingerprint": alert.get("fingerprint", ""),
                       "raw": raw_evidence(alert)})
    severity = "info" if resolved else _SEVERITY.get(labels.get("severity", ""), "warning")
    record: dict[str, Any] = {
        "id": f"{prefix}-{fingerprint}-{alert.get('startsAt')}-{status}", "type": kind,
        "time": time, "severity": severity, "scope": entry.get("scope"),
        "entity": entity or None, "node": node or None,
        "message": str(annotations.get("summary") or annotations.get("description") or name),
        "attributes": attributes,
    }
    if labels.get("cluster"):
        record["cluster"] = labels["cluster"]
    if labels.get("project"):
        record["project"] = labels["project"]
    return record


def parse(text: str, ctx: Context,
          mapping: dict[str, dict[str, Any]] | None = None) -> list[dict[str, Any] | Reject]:
    payload = json_object(text, "the webhook body")
    if str(payload.get("version", "4")) != "4":
        raise ParseError("version", f"unsupported payload version {payload.get('version')!r}")
    alerts = payload.get("alerts")
    if not isinstance(alerts, list):
        raise ParseError("alerts", "missing or not a list")
    table = mapping or DEFAULT_MAPPING
    return [alert_record(alert, i, payload, ctx, table) for i, alert in enumerate(alerts)]


ADAPTER = Adapter("alertmanager", parse, doc="Prometheus Alertmanager webhook v4")
