"""NVIDIA Xid lines from the kernel log (dmesg, journald or syslog) -> `node.xid` events.

Accepted shapes:
- syslog: `Nov 30 08:57:34 node-041 kernel: NVRM: Xid (PCI:0000:9b:00): 79, pid=..., GPU has
  fallen off the bus.` (no year, no zone: the year of `observed_at`, UTC; documented)
- ISO prefix: `2026-11-30T08:57:34.120Z node-041 kernel: NVRM: Xid ...`
- bare dmesg: `[123456.789] NVRM: Xid (PCI:0000:9b:00): 79, ...` (uptime only: the time is
  `observed_at`, and `attributes.time_source = observed`).
Other lines are skipped (a kernel log is mostly not Xids); a line that says `Xid` but cannot be
read is dead-lettered. The catalog maps the Xid number to a class and NVIDIA's recommended
action (from NVIDIA's Xid catalog, summarised).
"""

from __future__ import annotations

import re
from typing import Any

from ingest.adapters import Adapter, Context, Reject, line_time, raw_evidence
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
    119: ("gpu_hardware", "GSP RPC timeout: reset the GPU; update firmware/driver", "critical"),
    120: ("gpu_hardware", "GSP error: reset the GPU; update firmware/driver", "critical"),
}

_XID = re.compile(r"NVRM: Xid \(PCI:(?P<pci>[0-9a-fA-F:.]+)\): (?P<xid>\d+)(?:, (?P<detail>.*))?")
def parse(text: str, ctx: Context) -> list[dict[str, Any] | Reject]:
    out: list[dict[str, Any] | Reject] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if "Xid" not in line:
            continue
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
