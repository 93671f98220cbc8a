"""dcgm-exporter samples (the Prometheus text exposition it serves on `/metrics`, or a saved
scrape) -> the GPU events they show. Gauges are states, not events, so only what is wrong
becomes one:

- `DCGM_FI_DEV_XID_ERRORS` > 0 (the value is the last Xid; `err_code`/`err_msg` labels),
  `DCGM_EXP_XID_ERRORS_COUNT{xid=...}` > 0 -> `node.xid` (`xid`, `gpu`, the catalogue's class);
- `DCGM_FI_DEV_ECC_DBE_VOL_TOTAL` / `..._AGG_TOTAL` > 0 -> `node.ecc` (`kind: dbe`, `count`);
- `DCGM_FI_DEV_GPU_TEMP` >= `THERMAL_C` (85) -> `node.thermal` (`temperature_c`);
- `DCGM_FI_DEV_CLOCK_THROTTLE_REASONS` / `DCGM_FI_DEV_CLOCKS_EVENT_REASONS` with a hardware
  or thermal bit -> `node.throttled` (`reason`);
- `DCGM_FI_DEV_ROW_REMAP_FAILURE` > 0 -> `node.health` (`system: memory`, failure).

The node is the `Hostname` label, else the shipper's; the GPU the `gpu` label; the time the
sample's own timestamp (milliseconds) when it has one, else when it was read. Ids are a
function of node, GPU, metric and value, so re-reading the same scrape is the same events.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from ingest.base import Adapter, Context, Reject, raw_evidence

THERMAL_C = 85.0
_SAMPLE = re.compile(r"^(?P<name>DCGM_(?:FI|EXP)_\w+)\{(?P<labels>[^}]*)\}\s+(?P<value>[-+\d.eE]+)"
                     r"(?:\s+(?P<ts>\d{10,13}))?\s*$")
_LABEL = re.compile(r'(?<!\w)(?P<k>\w++)="(?P<v>(?:[^"\\]|\\.)*+)"')
# DCGM clock event reason bits that mean the hardware held the clocks down
_REASONS = {0x8: "hw_slowdown", 0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "power_brake"}


def parse(text: str, ctx: Context) -> list[dict[str, Any] | Reject]:
    out: list[dict[str, Any] | Reject] = []
    for number, line in enumerate(text.splitlines(), start=1):
        m = _SAMPLE.match(line.strip())
        if not m:
            continue
        labels = {x["k"]: x["v"] for x in _LABEL.finditer(m["labels"])}
        try:
            value = float(m["value"])
        except ValueError:
            continue
        node = labels.get("Hostname") or ctx.node
        gpu = labels.get("gpu", "")
        if not node:
            out.append(Reject("Hostname", "a sample without a Hostname label and no node "
                              "from the shipper", raw_evidence(line), f"{ctx.origin}:{number}"))
            continue
        when, source = ctx.observed_at.isoformat(), "observed"
        if m["ts"]:
            stamp = int(m["ts"]) / (1000 if len(m["ts"]) == 13 else 1)
            when, source = datetime.fromtimestamp(stamp, tz=UTC).isoformat(), "line"
        base = {"time": when, "scope": "gpu", "entity": f"{node}/gpu{gpu}", "node": node,
                "message": line.strip()[:500]}
        attrs: dict[str, Any] = {"gpu": gpu, "metric": m["name"], "time_source": source,
                                 "uuid": labels.get("UUID"), "raw": raw_evidence(line)}
        name = m["name"]
        key = f"dcgm-{node}-{gpu}-{name}-{value:g}"
        if name in ("DCGM_FI_DEV_XID_ERRORS", "DCGM_EXP_XID_ERRORS_COUNT",
                    "DCGM_FI_DEV_XID_ERRORS_ACTIVE") and value > 0:
            # the value is the last Xid; the count metrics carry it in a label
            label = labels.get("xid") or labels.get("err_code")
            xid = int(label) if label and label.isdigit() else int(value)
            from ingest.xid import CATALOG

            klass, action, severity = CATALOG.get(xid, ("unknown", "look up the Xid", "error"))
            out.append({**base, "id": f"dcgm-{node}-{gpu}-xid-{xid}", "type": "node.xid",
                        "severity": severity,
                        "attributes": {**attrs, "xid": xid, "class": klass, "action": action,
                                       "detail": labels.get("err_msg")}})
        elif name.startswith("DCGM_FI_DEV_ECC_DBE") and value > 0:
            out.append({**base, "id": key, "type": "node.ecc", "severity": "critical",
                        "attributes": {**attrs, "kind": "dbe", "count": int(value)}})
        elif name == "DCGM_FI_DEV_GPU_TEMP" and value >= THERMAL_C:
            out.append({**base, "id": key, "type": "node.thermal", "severity": "warning",
                        "attributes": {**attrs, "temperature_c": value,
                                       "limit_c": THERMAL_C}})
        elif name in ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
                      "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"):
            bits = int(value)
            reasons = [why for bit, why in _REASONS.items() if bits & bit]
            if reasons:
                out.append({**base, "id": key, "type": "node.throttled", "severity": "warning",
                            "attributes": {**attrs, "reason": ",".join(reasons)}})
        elif name == "DCGM_FI_DEV_ROW_REMAP_FAILURE" and value > 0:
            out.append({**base, "id": key, "type": "node.health", "severity": "critical",
                        "attributes": {**attrs, "system": "memory", "status": "failure"}})
    return out


def healthy(text: str) -> bool:
    """Samples this adapter reads (a scrape where nothing is wrong is no event)."""
    return any(_SAMPLE.match(line.strip()) for line in text[:200_000].splitlines()
               if "DCGM_" in line)


ADAPTER = Adapter("dcgm-exporter", parse, doc="dcgm-exporter /metrics samples (Xid, DBE ECC, "
                  "temperature, clock event reasons, row-remap failure)", line_oriented=True,
                  healthy=healthy)
