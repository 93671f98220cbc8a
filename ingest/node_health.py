"""GPU and node health in node logs (part of the `node-log` adapter): `dcgmi health -c` and
`dcgmi diag` tables, health-checker JSON lines (NVSentinel's preflight diagnostics), NVSwitch
SXid and Fabric Manager errors, kernel panics, the host OOM killer and segfaults."""

from __future__ import annotations

import re
from typing import Any

from ingest.base import Context, Reject, raw_evidence
from ingest.redact import clip

_SXID = re.compile(r"SXid \(PCI:(?P<pci>[0-9a-fA-F:.]+)\): (?P<sxid>\d+), (?P<sev>Non-fatal|Fatal)"
                   r"(?:.*?[Ll]ink (?P<link>\d+))?")
_FM = re.compile(r"detected NVSwitch (?P<sev>non-fatal|fatal) error (?P<sxid>\d+) .*?pci bus id "
                 r"(?P<pci>[0-9a-fA-F:.]+)(?:.*?port (?P<port>\d+))?", re.I)
_PANIC = re.compile(r"Kernel panic - not syncing: (?P<why>.+)")
# a process name is read whole, parentheses in it too: systemd names a service's process
# before exec `(resolved)`, which the kernel prints `Killed process 15925 ((resolved))`
_OOM_KILL = re.compile(r"(?P<cgroup>Memory cgroup )?[Oo]ut of memory: Kill(?:ed)? process "
                       r"(?P<pid>\d{1,10}) \((?P<proc>[^\n]{1,64}?)\)(?=[\s,]|$)")
_OOM_CONSTRAINT = re.compile(r"oom-kill:constraint=(?P<constraint>\w{1,40}),[^\n]{0,600}?"
                             r"(?:task_memcg=(?P<memcg>[^,\s]{0,400}),)?task=(?P<proc>[^,\n]{1,64}),"
                             r"pid=(?P<pid>\d{1,10})")
_SEGV = re.compile(r"(?<![\w.-])(?P<proc>[\w.-]++)\[(?P<pid>\d+)\]: segfault at \w+ ip \w+ sp "
                   r"\w+ error \d+"
                   r"(?: in (?P<lib>[^\[\s]+))?")
_DCGM_ROW = re.compile(r"^\|\s*(?P<left>[^|]*?)\s*\|\s*(?P<right>[^|]*?)\s*\|$")
_DCGM_CLASS = {"memory": "gpu_hardware", "pcie": "gpu_hardware", "nvlink": "nvlink",
               "thermal": "gpu_hardware", "power": "gpu_hardware", "inforom": "gpu_hardware",
               "driver": "gpu_hardware", "nvswitch": "nvlink", "sm": "gpu_hardware"}


def dcgm_health(lines: list[str], ctx: Context, ref: str) -> list[dict[str, Any] | Reject]:
    """`dcgmi health -c` table -> one `node.health` per GPU subsystem that is not healthy."""
    if not ctx.node:
        return [Reject("node", "a dcgmi health report names no host: ship it with the node",
                       raw_evidence("\n".join(lines)), ref)]
    found: list[dict[str, Any]] = []
    gpu = ""
    for line in lines:
        row = _DCGM_ROW.match(line.strip())
        if not row:
            continue
        left, right = row.group("left"), row.group("right")
        if re.fullmatch(r"-> \d+", left):
            gpu = left[3:]
        elif left.startswith("-> ") and left.endswith(" system"):
            system = left[3:-len(" system")].strip()
            found.append({"gpu": gpu, "system": system.lower().replace(" ", "_"),
                          "status": right.lower() or "failure", "message": []})
        elif found and right and (left in ("", "System Health") or left.startswith("System")):
            found[-1]["message"].append(right)
    out: list[dict[str, Any] | Reject] = []
    for item in found:
        message = " ".join(item.pop("message")) or f"{item['system']} {item['status']}"
        klass = _DCGM_CLASS.get(item["system"].split("_")[0], "gpu_hardware")
        out.append({
            "type": "node.health", "time": ctx.observed_at.isoformat(), "scope": "gpu",
            "entity": f"{ctx.node}/gpu{item['gpu']}", "node": ctx.node,
            "severity": "critical" if item["status"] == "failure" else "warning",
            "message": clip(message, 500),
            "attributes": {**item, "class": klass, "time_source": "observed",
                           "raw": raw_evidence("\n".join(lines))},
        })
    return out


def node_fault(body: str, node: str, ctx: Context) -> dict[str, Any] | None:
    """NVSwitch errors (kernel SXid lines, Fabric Manager), kernel panics, the host OOM
    killer and segfaults."""
    if (m := _SXID.search(body)) or (m := _FM.search(body)):
        fatal = m.group("sev").lower() == "fatal"
        domain, _, rest = m.group("pci").partition(":")
        pci = f"{domain[-4:]}:{rest}".lower()  # Fabric Manager prints 8-digit domains
        port = m.groupdict().get("link") or m.groupdict().get("port")
        return {"type": "node.health", "scope": "node", "entity": f"{node}/nvswitch-{pci}",
                "severity": "critical" if fatal else "warning",
                "attributes": {"system": "nvswitch", "status": "failure" if fatal else "warning",
                               "sxid": int(m.group("sxid")), "pci": pci,
                               "port": int(port) if port else None,
                               "class": "nvlink"}}
    if m := _PANIC.search(body):
        return {"type": "node.not_ready", "scope": "node", "entity": node,
                "severity": "critical",
                "attributes": {"reason": clip(f"kernel panic: {m.group('why')}", 200)}}
    job = {"project": ctx.project, "job_id": ctx.job_id,
           **({"attempt": ctx.attempt} if ctx.attempt is not None else {})} \
        if ctx.project and ctx.job_id else None
    if m := _OOM_KILL.search(body) or _OOM_CONSTRAINT.search(body):
        attrs = {"kind": "host", "pid": int(m.group("pid")), "process": m.group("proc")}
        found = m.groupdict()
        if found.get("constraint"):
            attrs["constraint"] = found["constraint"]
        if found.get("memcg"):
            attrs["memcg"] = found["memcg"]
        if found.get("cgroup"):
            attrs["constraint"] = "CONSTRAINT_MEMCG"
        if job:
            return {"type": "job.oom", "scope": "node", "entity": node, "severity": "error",
                    **job, "attributes": attrs}
        return {"type": "node.health", "scope": "node", "entity": node, "severity": "warning",
                "attributes": {"system": "host_memory", "status": "warning", **attrs}}
    if m := _SEGV.search(body):
        attrs = {"pid": int(m.group("pid")), "process": m.group("proc"), "signal": "SIGSEGV",
                 "library": m.group("lib")}
        if job:
            return {"type": "job.worker_exited", "scope": "node", "entity": node,
                    "severity": "error", **job, "attributes": attrs}
        return {"type": "node.health", "scope": "node", "entity": node, "severity": "warning",
                "attributes": {"system": "process", "status": "warning", **attrs}}
    return None


_DIAG_ROW = re.compile(r"^\|\s*(?P<test>[^|]+?)\s*\|\s*(?P<result>Fail|Warn)\w*\s*-?\s*"
                       r"(?P<gpus>(?:GPUs?:?\s*)?[\d, ]+|All)?\s*\|?$", re.I)


def _cell(line: str) -> str:
    """The right cell of a `| left | right |` row as printed, less its one pad space: the
    rest of a word cut at the cell's end starts with its next letter, a new word with a
    space."""
    parts = line.strip().split("|")
    raw = parts[2] if len(parts) > 3 else ""
    return raw[1:].rstrip() if raw.startswith(" ") else raw.rstrip()


def _cell_join(fragments: list[str], width: int) -> str:
    """A wrapped cell's text: DCGM fills `width` characters and cuts, mid-word when the word
    did not fit (the piece after the cut then starts with a letter, and runs on)."""
    text = ""
    for fragment in fragments:
        glued = text and len(text) - text.rfind("\n") - 1 >= width and fragment[:1] and \
            not fragment[0].isspace()
        text += fragment if glued or not text else f"\n{fragment}"
    return " ".join(text.split())


_NOT_INITIALISED = re.compile(r"system not yet initiali[sz]ed", re.I)
_GPU_N = re.compile(r"\bGPU (?P<gpu>\d{1,3})\b")


def dcgm_diag(lines: list[str], ctx: Context, ref: str) -> list[dict[str, Any] | Reject]:
    """`dcgmi diag -r N` table -> one `node.health` per failed (or warned) test and GPU, with
    the Warning/Info rows that follow it as the message; an `Error` row (DCGM 3: `GPU 3 has
    uncorrectable memory errors and row remappings are pending`) -> its GPU's own. A failure
    whose warnings all say CUDA could not start (`cuInit ... 'system not yet initialized'`)
    is the NVSwitch fabric not being up (Fabric Manager), not the GPUs' memory."""
    if not ctx.node:
        return [Reject("node", "a dcgmi diag report names no host: ship it with the node",
                       raw_evidence("\n".join(lines)), ref)]
    border = next((line.strip() for line in lines if line.strip().startswith("+-")), "")
    width = max(0, len(border.rstrip("+").split("+")[-1]) - 3)  # less the cell's padding
    found: list[dict[str, Any]] = []
    group: list[dict[str, Any]] = []  # the entries of the last failed row (its GPUs)
    last_test = ""
    for line in lines:
        if m := _DIAG_ROW.match(line.strip()):
            test = m.group("test").strip() or last_test  # `|  | Fail - GPU: 0 |`: its test's
            if test.lower() in ("warning", "info") or not test:
                continue
            gpus = re.findall(r"\d+", m.group("gpus") or "") or ["all"]
            group = [{"gpu": gpu, "system": test.lower().replace(" ", "_").replace("/", "_"),
                      "status": "failure" if m.group("result").lower().startswith("fail")
                      else "warning", "message": []} for gpu in gpus]
            found.extend(group)
        elif (row := _DCGM_ROW.match(line.strip())) and row.group("left") == "Error":
            text = row.group("right")
            gpu = _GPU_N.search(text)
            group = [{"gpu": gpu.group("gpu") if gpu else "all", "system": "diag_error",
                      "status": "failure", "message": [_cell(line)]}]
            found.extend(group)
        elif group and row and row.group("left") in ("Warning", "Info", ""):
            for item in group:
                item["message"].append(_cell(line))
        elif row:
            group = []
        if row and row.group("left") not in ("", "Warning", "Info", "Error"):
            last_test = row.group("left")
    out: list[dict[str, Any] | Reject] = []
    for item in found:
        message = _cell_join(item.pop("message"), width) or \
            f"dcgmi diag: {item['system']} failed"
        if item["system"] == "diag_error" and "row remap" in message.lower():
            item["system"] = "row_remap"
        klass = _DCGM_CLASS.get(item["system"].split("_")[0], "gpu_hardware")
        if _NOT_INITIALISED.search(message) and item["status"] == "failure":
            item.update(system="fabric_manager", failed_test=item["system"])
            klass = "nvlink"
            message = ("CUDA cannot start on the GPUs ('system not yet initialized'): on an "
                       f"NVSwitch system, Fabric Manager is not running. {message}")
        gpu = item["gpu"]
        out.append({
            "type": "node.health", "time": ctx.observed_at.isoformat(), "scope": "gpu",
            "entity": f"{ctx.node}/gpu{gpu}" if gpu != "all" else ctx.node, "node": ctx.node,
            "severity": "critical" if item["status"] == "failure" else "warning",
            "message": clip(message, 500),
            "attributes": {**item, "class": klass, "source": "dcgmi diag",
                           "time_source": "observed", "raw": raw_evidence("\n".join(lines))}})
    return out


def health_json(line: str, ctx: Context) -> dict[str, Any] | None:
    """A health checker's JSON log line (NVSentinel's preflight DCGM diagnostics:
    `{"event": "Test fail", "gpu": "GPU-...", "test": "memory", "error_code": ..., "detail":
    ..., "timestamp": ...}`) -> `node.health` at its timestamp."""
    import json

    try:
        doc = json.loads(line)
    except ValueError:
        return None
    if not isinstance(doc, dict) or doc.get("event") not in ("Test fail", "Test warn"):
        return None
    node = str(doc.get("node") or doc.get("hostname") or ctx.node or "")
    gpu = str(doc.get("gpu") or "")
    failed = doc["event"] == "Test fail"
    when = str(doc.get("timestamp") or "") or ctx.observed_at.isoformat()
    return {"type": "node.health", "time": when, "scope": "gpu" if gpu else "node",
            "entity": f"{node}/{gpu}" if gpu else node, "node": node or None,
            "severity": "critical" if failed else "warning",
            "message": clip(str(doc.get("detail") or doc["event"]), 500),
            "attributes": {"gpu": gpu or None, "system": str(doc.get("test") or "unknown"),
                           "status": "failure" if failed else "warning",
                           "error_code": doc.get("error_code"),
                           "source": str(doc.get("module") or "health json"),
                           "time_source": "line" if doc.get("timestamp") else "observed",
                           "raw": raw_evidence(line)}}


def table(table: list[str], ctx: Context, ref: str) -> list[dict[str, Any] | Reject]:
    if any("Health Monitor Report" in row for row in table):
        return dcgm_health(table, ctx, ref)
    if any(re.match(r"^\|\s*Diagnostic\s*\|\s*Result", row) for row in table) or any(
            _DIAG_ROW.match(row) for row in table):  # rows pasted without their header
        return dcgm_diag(table, ctx, ref)
    return []


def two_cells(line: str) -> bool:
    """A `| left | right |` row (DCGM's tables), pasted without the table around it."""
    return len(line) < 2000 and _DCGM_ROW.match(line) is not None


_HUNG = re.compile(r"INFO: task (?P<proc>\S{1,64}?):(?P<pid>\d{1,9}) blocked for more than "
                   r"(?P<s>\d{1,7}) seconds")
_TRACE_MODULE = re.compile(r"\+0x[0-9a-f]+/0x[0-9a-f]+ \[(?P<mod>\w{1,64})\]\s*$")


def hung_task(lines: list[str], number: int, host: str, time: str, source: str,
              ctx: Context) -> dict[str, Any] | Reject | None:
    """`INFO: task python:12345 blocked for more than 120 seconds.` -> `node.health` (system
    `kernel`, status `warning`: evidence, not a fault of its own), with the module its call
    trace waits in (`[nfs]`, `[nvidia_uvm]`, `[lustre]`: which system hung it) when the trace
    follows within 40 lines."""
    line = lines[number - 1]
    m = _HUNG.search(line)
    if m is None:
        return None
    node = host or ctx.node
    if not node:
        return Reject("node", "a hung task names no host and none was given",
                      raw_evidence(line), f"{ctx.origin}:{number}")
    attrs: dict[str, Any] = {"system": "kernel", "status": "warning", "check": "hung_task",
                             "process": m.group("proc"), "pid": int(m.group("pid")),
                             "blocked_s": int(m.group("s")), "time_source": source,
                             "raw": raw_evidence(line)}
    for later in lines[number:number + 40]:
        if _HUNG.search(later):
            break  # the next report
        if module := _TRACE_MODULE.search(later):
            attrs["waits_in"] = module.group("mod")
            break
    return {"type": "node.health", "time": time, "scope": "node", "entity": node, "node": node,
            "severity": "warning", "message": clip(line[m.start():].strip(), 500),
            "attributes": attrs}
