"""NVIDIA Xid lines from the kernel log (dmesg, journald or syslog) -> `node.xid` events.

Accepted shapes:
- syslog: `Nov 30 08:57:34 node-041 kernel: NVRM: Xid (PCI:0000:9b:00): 79, pid=..., GPU has
  fallen off the bus.` (no year, no zone: the year of `observed_at`, UTC; documented)
- ISO prefix: `2026-11-30T08:57:34.120Z node-041 kernel: NVRM: Xid ...`
- every prefix of `ingest.timestamps` (dmesg -T and -x, raw dmesg and /dev/kmsg with a boot
  time, else `time_source = observed`; glog, RFC 5424, epoch);
- the Xid-less "fallen off the bus" block of newer drivers -> Xid 79 (`xid_less: true`).
Severity is the catalogue's unless the line says `Fatal` / `Non-fatal` (NVLink5 codes do).
Other lines are skipped (a kernel log is mostly not Xids); a line that says `Xid` but cannot be
read is dead-lettered. The catalog maps the Xid number to a class and NVIDIA's recommended
action (from NVIDIA's Xid catalog, summarised).
"""

from __future__ import annotations

import re
from typing import Any

from ingest.base import Adapter, Context, Reject, line_time, raw_evidence
from ingest.redact import clip

# xid -> (class, recommended action, severity)
CATALOG: dict[int, tuple[str, str, str]] = {
    13: ("application", "check the application for out-of-range access; restart the job",
         "error"),
    31: ("application", "GPU memory page fault: debug the application or driver", "error"),
    43: ("application", "GPU stopped processing: restart the application", "error"),
    45: ("application", "preemptive cleanup after a fault: follow the preceding Xid", "warning"),
    48: ("gpu_hardware", "double-bit ECC error: reset the GPU; replace if it repeats",
         "critical"),
    61: ("gpu_hardware", "internal micro-controller breakpoint: reset the GPU", "critical"),
    62: ("gpu_hardware", "internal micro-controller halt: reset the GPU", "critical"),
    63: ("gpu_hardware", "ECC page retirement / row remapping recorded: reset when convenient",
         "warning"),
    64: ("gpu_hardware", "ECC page retirement / row remap failed: drain and reset the GPU",
         "critical"),
    74: ("nvlink", "NVLink error: check the link; reset the GPU, replace on repeat", "critical"),
    79: ("gpu_hardware", "GPU has fallen off the bus: drain the node, reseat or replace",
         "critical"),
    92: ("gpu_hardware", "high single-bit ECC rate: monitor; replace if it grows", "warning"),
    94: ("gpu_hardware", "contained ECC error: restart the affected application", "error"),
    95: ("gpu_hardware", "uncontained ECC error: reset the GPU and drain the node", "critical"),
    109: ("application", "context switch timeout: restart the application; a GPU reset if "
                         "it repeats", "error"),
    119: ("gpu_hardware", "GSP RPC timeout: reset the GPU; update firmware/driver", "critical"),
    120: ("gpu_hardware", "GSP error: reset the GPU; update firmware/driver", "critical"),
    121: ("gpu_hardware", "C2C (chip-to-chip) link error: reset the GPU; replace on repeat",
          "critical"),
    140: ("gpu_hardware", "unrecovered ECC error: reset the GPU and drain the node", "critical"),
    143: ("gpu_hardware", "GPU initialisation failure: reset; replace if it repeats",
          "critical"),
    # NVLink5 (Blackwell) unit errors: the line says Fatal or Non-fatal
    144: ("nvlink", "NVLink SAW error: reset the GPU if fatal; check the link", "error"),
    145: ("nvlink", "NVLink RLW error: reset the GPU if fatal; check the link", "error"),
    146: ("nvlink", "NVLink TLW error: reset the GPU if fatal; check the link", "error"),
    147: ("nvlink", "NVLink TREX error: reset the GPU if fatal; check the link", "error"),
    148: ("nvlink", "NVLink NVLPW control error: reset the GPU if fatal", "error"),
    149: ("nvlink", "NVLink NETIR error: reset the GPU if fatal; check the fabric", "error"),
    150: ("nvlink", "NVLink MSE error: reset the GPU if fatal", "error"),
    154: ("gpu_hardware", "the driver asks for a recovery action (GPU reset, node reboot or "
                          "drain): do what the line says", "critical"),
}


def _severity(default: str, detail: str) -> str:
    """The line's own word beats the catalogue's: `Non-fatal` is a warning, `Fatal` is
    critical (NVLink5 and newer codes say which)."""
    lower = detail.lower()
    if "non-fatal" in lower or "nonfatal" in lower or "non fatal" in lower:
        return "warning"
    if re.search(r"\bfatal\b", lower):
        return "critical"
    return default

_XID = re.compile(r"NVRM: Xid \(PCI:(?P<pci>[0-9a-fA-F:.]+)\): (?P<xid>\d+)(?:, (?P<detail>.*))?")
# `The NVIDIA GPU 0000:b3:00.0` (newer, over several lines), `GPU at 0000:01:00.0 has fallen
# off the bus.` (older drivers, one line; also `GPU at PCI:0000:01:00.0`)
_WORD_XID = re.compile(r"\bXid\b")
_OFF_BUS_GPU = re.compile(r"NVRM: (?:The NVIDIA )?GPU (?:at )?(?:PCI:)?(?P<pci>[0-9a-fA-F]{4}:"
                          r"[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.\d)")


def off_the_bus(lines: list[str], number: int, ctx: Context) -> dict[str, Any] | Reject | None:
    """The Xid-less "fallen off the bus" report (newer drivers print it over several lines,
    `NVRM: The NVIDIA GPU 0000:b3:00.0` / `(PCI ID: ...)` / `fallen off the bus ...`): Xid 79
    of the GPU the block names, at the time of the block's first line ({} when an Xid 79 of
    the same GPU is printed next to it: the same failure)."""
    window = lines[max(0, number - 4):number]
    start = next((line for line in reversed(window) if _OFF_BUS_GPU.search(line)), None)
    if start is None:
        return None
    pci = _OFF_BUS_GPU.search(start)
    assert pci is not None
    time, host, source = line_time(start, ctx)
    node = host or ctx.node
    block = "\n".join(window[window.index(start):])
    if not node:
        return Reject("node", "no host in the line and none given by the shipper",
                      raw_evidence(block), f"{ctx.origin}:{number}")
    bus = pci.group("pci")
    short = bus.rsplit(".", 1)[0].lower()  # the Xid line's form: domain:bus:device
    for near in lines[max(0, number - 6):number + 5]:  # the driver printed the Xid too
        xid = _XID.search(near)
        if xid and xid.group("xid") == "79" and xid.group("pci").lower() == short:
            return {}
    klass, action, severity = CATALOG[79]
    return {
        "type": "node.xid", "time": time, "severity": severity, "scope": "gpu",
        "entity": f"{node}/pci-{short}", "node": node,
        "message": clip(" ".join(" ".join(block.split()).split(" NVRM: ")), 500),
        "attributes": {"xid": 79, "pci": short, "detail": "GPU has fallen off the bus (the "
                       "driver printed no Xid)", "xid_less": True, "class": klass,
                       "action": action, "time_source": source, "raw": raw_evidence(block)},
    }


_GSP = re.compile(r"NVRM: GPU(?P<gpu>\d{1,3}) _kgsp(?:IsHeartbeatTimedOut|LogRpcTimeout)\b")


def gsp_timeout(lines: list[str], number: int, ctx: Context) -> dict[str, Any] | Reject | None:
    """The GPU's system processor stopped answering (`NVRM: GPU6 _kgspIsHeartbeatTimedOut:
    Heartbeat timed out`, `_kgspLogRpcTimeout: *** GSP Timeout ***`) with no Xid printed:
    Xid 119 of that GPU (by its index: the lines name no PCI address), `xid_less`. {} when an
    Xid 119/120 is printed near it (the same failure, named by the Xid line)."""
    line = lines[number - 1]
    m = _GSP.search(line)
    if m is None:
        return None
    for near in lines[max(0, number - 11):number + 10]:
        if (xid := _XID.search(near)) and xid.group("xid") in ("119", "120"):
            return {}
    time, host, source = line_time(line, ctx)
    node = host or ctx.node
    if not node:
        return Reject("node", "no host in the line and none given by the shipper",
                      raw_evidence(line), f"{ctx.origin}:{number}")
    klass, action, severity = CATALOG[119]
    return {
        "type": "node.xid", "time": time, "severity": severity, "scope": "gpu",
        "entity": f"{node}/gpu{m.group('gpu')}", "node": node,
        "message": clip(line[m.start():].strip(), 500),
        "attributes": {"xid": 119, "gpu": m.group("gpu"), "detail": "GSP stopped responding "
                       "(the driver printed no Xid)", "xid_less": True, "class": klass,
                       "action": action, "time_source": source, "raw": raw_evidence(line)},
    }


def first_report(found: dict[str, Any] | Reject, seen: set[tuple[str, str]]) -> bool:
    """Whether an Xid-less report is the first of its GPU in its minute (older drivers print
    `GPU at ... has fallen off the bus.` at every access): {} (an Xid 79 beside it) is not."""
    if isinstance(found, Reject):
        return True
    if not found:
        return False
    key = (str(found["entity"]), str(found["time"])[:16])
    if key in seen:
        return False
    seen.add(key)
    return True


def parse(text: str, ctx: Context) -> list[dict[str, Any] | Reject]:
    out: list[dict[str, Any] | Reject] = []
    lines = text.splitlines()
    lost: set[tuple[str, str]] = set()
    for number, line in enumerate(lines, start=1):
        if "fallen off the bus" in line and not _XID.search(line):
            found = off_the_bus(lines, number, ctx)
            if found is not None:
                if first_report(found, lost):
                    out.append(found)
                continue
        if "_kgsp" in line and (found := gsp_timeout(lines, number, ctx)) is not None:
            if first_report(found, lost):
                out.append(found)
            continue
        if not _WORD_XID.search(line) or ("SXid" in line and not _XID.search(line)):
            continue  # an NVSwitch SXid is node-log's (node.health, system nvswitch); the
            # driver's `_kgspLogXid119:` banner is the Xid line's company, not an Xid
        ref = f"{ctx.origin}:{number}"
        match = _XID.search(line)
        if not match:
            out.append(Reject("line", "mentions Xid but is not an NVRM Xid line",
                              raw_evidence(line), ref))
            continue
        time, host, source = line_time(line, ctx)
        node = host or ctx.node
        if not node:
            out.append(Reject("node", "no host in the line and none given by the shipper",
                              raw_evidence(line), ref))
            continue
        xid = int(match.group("xid"))
        klass, action, severity = CATALOG.get(xid, ("unknown", "look up the Xid in NVIDIA's "
                                                    "catalog", "error"))
        severity = _severity(severity, match.group("detail") or "")
        pci = match.group("pci")
        out.append({
            "type": "node.xid", "time": time, "severity": severity, "scope": "gpu",
            "entity": f"{node}/pci-{pci}", "node": node,
            "message": clip(line[match.start():].strip(), 500),
            "attributes": {"xid": xid, "pci": pci, "detail": clip(match.group("detail") or "", 500),
                           "class": klass, "action": action, "time_source": source,
                           "raw": raw_evidence(line)},
        })
    return out


ADAPTER = Adapter("xid", parse, doc="NVIDIA Xid kernel log lines", line_oriented=True)
