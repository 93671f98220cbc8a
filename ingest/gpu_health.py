"""GPU and fabric health beyond Xid (part of the `node-log` adapter).

- NVIDIA Fabric Manager failing to start (`nv-fabricmanager[...]: request to query NVSwitch
  device information ... failed`, `nvidia-fabricmanager.service: ... status=1/FAILURE`,
  `"/usr/bin/nv-fabricmanager ..." failed!`) -> one `node.health` (system `fabric_manager`)
  per node and minute, whatever the number of lines saying it;
- `dcgmi nvlink -s` / `--link-status`: a GPU (or NVSwitch) with a link Down -> `node.health`
  (system `nvlink`) naming the links;
- `nvidia-smi -q`: Retired Pages (`Pending Page Blacklist: Yes`), Remapped Rows
  (`Pending: Yes` -> warning, a reset applies it; `Remapping Failure Occurred: Yes` ->
  failure) -> `node.health`; an active HW slowdown / thermal / power-brake clocks event reason
  -> `node.throttled`; at the report's `Timestamp` (local time);
- NVSentinel health events (`checkName`, `isHealthy`, `entitiesImpacted`,
  `generatedTimestamp`), one per line or pretty-printed -> `node.health` (a healthy event
  is the end of a condition, not a new one, and is skipped).
`localise` turns a journal line printed in a CJK locale (`11月 15 14:15:47`) into the C
locale's `Nov 15 14:15:47` so its time and host are read.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

from ingest.base import Context, raw_evidence
from ingest.redact import clip

_MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
_CJK_MONTH = re.compile(r"^(?P<m>1[0-2]|0?[1-9])\u6708 ")
_FM_FAIL = re.compile(r"(?<![\w.-])(?:nv-|nvidia-)fabricmanager[\w.-]*+(?:\[\d+\])?: .{0,400}?"
                      r"(?:failed|FAILURE|[Ee]rror)")
_GPU_ID = re.compile(r"^\s*(?P<kind>gpuId|physicalId) (?P<id>\d+):\s*$")
_LINKS = re.compile(r"^\s*[UDX_](?: [UDX_])*\s*$")
_SMI_GPU = re.compile(r"^GPU (?P<pci>[0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d)\s*$")
_SMI_KV = re.compile(r"^(?P<indent>\s+)(?P<key>[A-Za-z][\w ()/-]{0,60}?)\s*: (?P<value>.{0,200})$")
_SMI_SECTION = re.compile(r"^(?P<indent>\s+)(?P<name>[A-Z][\w /-]{0,60}?)\s*$")
_THROTTLE = {"HW Slowdown": "hw_slowdown", "HW Thermal Slowdown": "hw_thermal",
             "HW Power Brake Slowdown": "power_brake", "SW Thermal Slowdown": "sw_thermal"}


def localise(line: str) -> str:
    if "\u6708" not in line[:4]:
        return line
    m = _CJK_MONTH.match(line)
    return f"{_MONTHS[int(m['m']) - 1]} {line[m.end():]}" if m else line


def fabric_manager_failure(body: str) -> dict[str, Any] | None:
    if "fabricmanager" not in body or len(body) > 4000 or not _FM_FAIL.search(body):
        return None
    return {"type": "node.health", "scope": "node", "severity": "error",
            "attributes": {"system": "fabric_manager", "status": "failure", "class": "nvlink",
                           "detail": clip(body.split(": ", 1)[-1], 200)}}


def _base(ctx: Context, node: str, entity: str, when: str, source: str,
          raw: str) -> dict[str, Any]:
    return {"time": when, "node": node, "scope": "gpu" if entity != node else "node",
            "entity": entity, "attributes": {"time_source": source, "raw": raw_evidence(raw)}}


def nvlink_status(lines: list[str], ctx: Context) -> tuple[list[dict[str, Any]], set[int]]:
    """`dcgmi nvlink -s`: records, and the indexes of the lines they read."""
    out: list[dict[str, Any]] = []
    used: set[int] = set()
    start = next((i for i, ln in enumerate(lines) if "NvLink Link Status" in ln), None)
    if start is None or not ctx.node:
        return out, used
    who: tuple[str, str] | None = None
    for i in range(start, min(len(lines), start + 2000)):
        line = lines[i]
        if line.strip().startswith("Key:"):
            used.add(i)
            break
        used.add(i)
        if m := _GPU_ID.match(line):
            who = (m["kind"], m["id"])
        elif who and _LINKS.match(line):
            states = line.split()
            down = [n for n, s in enumerate(states) if s == "D"]
            if down:
                kind, ident = who
                entity = f"{ctx.node}/gpu{ident}" if kind == "gpuId" else \
                    f"{ctx.node}/nvswitch-{ident}"
                record = _base(ctx, ctx.node, entity, ctx.observed_at.isoformat(), "observed",
                               "\n".join(lines[start:i + 1]))
                record.update({"type": "node.health", "severity": "critical",
                               "message": f"{kind} {ident}: NVLink links down {down}"})
                record["attributes"].update({
                    "gpu": ident if kind == "gpuId" else None, "system": "nvlink",
                    "status": "failure", "class": "nvlink", "links_down": down,
                    "links": len(states), "source": "dcgmi nvlink -s"})
                out.append(record)
            who = None
    return out, used


def nvidia_smi_q(lines: list[str], ctx: Context) -> tuple[list[dict[str, Any]], set[int]]:
    """`nvidia-smi -q`: what its Retired Pages, Remapped Rows and clocks event reasons say."""
    from ingest.timestamps import local_time

    out: list[dict[str, Any]] = []
    used: set[int] = set()
    if not ctx.node or not any(_SMI_GPU.match(ln) for ln in lines[:5000]):
        return out, used
    when, source = ctx.observed_at.isoformat(), "observed"
    gpu, section, index = "", "", -1
    throttled: dict[tuple[int, str], list[tuple[str, str]]] = {}
    for i, line in enumerate(lines[:20000]):
        if line.startswith("Timestamp") and ":" in line:
            try:
                stamp = datetime.strptime(" ".join(line.split(":", 1)[1].split()),
                                          "%a %b %d %H:%M:%S %Y")
                when, source = local_time(stamp.isoformat(sep=" "), ctx), "line"
            except ValueError:
                pass
            continue
        if m := _SMI_GPU.match(line):
            gpu, section, index = m["pci"].lower(), "", index + 1
            continue
        if not gpu:
            continue
        if (s := _SMI_SECTION.match(line)) and len(s["indent"]) == 4:
            section = s["name"].strip()
            continue
        kv = _SMI_KV.match(line)
        if not kv:
            continue
        key, value = kv["key"].strip(), kv["value"].strip()
        finding: tuple[str, str, str] | None = None
        if section == "Retired Pages" and key == "Pending Page Blacklist" and value == "Yes":
            finding = ("page_retirement", "warning", "a retired page waits for a reset")
        elif section == "Remapped Rows" and key == "Pending" and value == "Yes":
            finding = ("row_remap", "warning", "a remapped row waits for a GPU reset")
        elif section == "Remapped Rows" and key == "Remapping Failure Occurred" and \
                value == "Yes":
            finding = ("row_remap", "failure", "row remapping failed (RMA criterion)")
        elif section.startswith("Clocks") and key in _THROTTLE and value == "Active":
            throttled.setdefault((index, gpu), []).append((key, line))
            used.add(i)
            continue
        if finding:
            system, status, message = finding
            record = _base(ctx, ctx.node, f"{ctx.node}/gpu{index}", when, source, line)
            record.update({"type": "node.health",
                           "severity": "critical" if status == "failure" else "warning",
                           "message": f"GPU {gpu}: {message}"})
            record["attributes"].update({"gpu": str(index), "system": system,
                                         "status": status, "class": "gpu_hardware",
                                         "pci": gpu, "source": "nvidia-smi -q"})
            out.append(record)
            used.add(i)
    for (index, gpu), active in throttled.items():
        out.append(_throttle(ctx, index, gpu, active, when, source))
    return out, used


def _throttle(ctx: Context, index: int, gpu: str, active: list[tuple[str, str]], when: str,
              source: str) -> dict[str, Any]:
    """One GPU's clocks event reasons as one `node.throttled`: `HW Slowdown` is the parent of
    `HW Thermal Slowdown` and `HW Power Brake Slowdown` (nvidia-smi prints them indented under
    it), so a slowdown with its cause is one throttle, named by the cause."""
    keys = [key for key, _ in active]
    causes = [k for k in keys if k != "HW Slowdown"] or keys
    record = _base(ctx, ctx.node, f"{ctx.node}/gpu{index}", when, source,
                   "\n".join(line for _, line in active))
    record.update({"type": "node.throttled", "severity": "warning",
                   "message": f"GPU {gpu}: {', '.join(keys)} active"})
    record["attributes"].update({"gpu": str(index), "reason": _THROTTLE[causes[0]],
                                 "reasons": [_THROTTLE[k] for k in keys], "pci": gpu})
    return record


def health_events(text: str, ctx: Context) -> list[dict[str, Any]] | None:
    """NVSentinel health events in `text` (a JSON object, a list, or one per line), or None
    when it holds none."""
    stripped = text.strip()
    if '"checkName"' not in stripped[:4000] or '"isHealthy"' not in stripped[:4000]:
        return None
    docs: list[Any] = []
    try:
        value = json.loads(stripped)
        docs = value if isinstance(value, list) else [value]
    except ValueError:
        decoder, at = json.JSONDecoder(), 0
        while at < len(stripped):
            while at < len(stripped) and stripped[at].isspace():
                at += 1
            if at >= len(stripped):
                break
            try:
                value, at = decoder.raw_decode(stripped, at)
            except ValueError:
                return None
            docs.append(value)
    out = []
    for doc in docs:
        event = doc.get("healthEvent", doc) if isinstance(doc, dict) else None
        if isinstance(event, dict) and (record := _health_event(event, ctx)) is not None:
            out.append(record)
    return out


def _health_event(event: dict[str, Any], ctx: Context) -> dict[str, Any] | None:
    if event.get("isHealthy") is not False:
        return None
    node = str(event.get("nodeName") or ctx.node or "")
    stamp = event.get("generatedTimestamp")
    when, source = ctx.observed_at.isoformat(), "observed"
    if isinstance(stamp, dict) and isinstance(stamp.get("seconds"), int | float):
        when = datetime.fromtimestamp(float(stamp["seconds"]), tz=UTC).isoformat()
        source = "line"
    elif isinstance(stamp, str) and stamp:
        when, source = stamp, "line"
    gpus = [str(e.get("entityValue")) for e in event.get("entitiesImpacted") or []
            if isinstance(e, dict) and str(e.get("entityType", "")).startswith("GPU")]
    fatal = bool(event.get("isFatal"))
    codes = event.get("errorCode") or []
    entity = f"{node}/gpu{gpus[0]}" if gpus and gpus[0].isdigit() else \
        f"{node}/{gpus[0]}" if gpus else node
    return {"type": "node.health", "time": when, "node": node or None,
            "scope": "gpu" if gpus else "node", "entity": entity,
            "severity": "critical" if fatal else "warning",
            "message": clip(str(event.get("message") or event.get("checkName")), 500),
            "attributes": {"gpu": gpus[0] if gpus else None,
                           "system": str(event.get("checkName")),
                           "status": "failure" if fatal else "warning",
                           "error_code": ",".join(str(c) for c in codes) or None,
                           "component": event.get("componentClass"),
                           "recommended_action": event.get("recommendedAction"),
                           "source": str(event.get("agent") or "NVSentinel"),
                           "time_source": source, "raw": raw_evidence(event)}}
