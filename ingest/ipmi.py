"""A node's power from its BMC: the IPMI System Event Log (`ipmitool sel list` / `sel elist`,
FreeIPMI's `ipmi-sel`) and Redfish `LogEntry` records (a `Logs/Sel` collection, or one entry)
-> `node.power`.

What is read (tests/ingest/fixtures/public/bmc/SOURCES in tests/ingest/fixtures/public/
SOURCES.md has the public samples):

- `30 | 11/15/2019 | 18:50:40 | Power Unit Pwr Unit Status | Power off/down | Asserted`
  -> `state: off` (`cause: power_down`); the same `Deasserted` -> `state: on`;
- a Power Unit's `AC lost` / `Power cycle` / `Soft-power control failure` (the whole node)
  -> `off` (`ac_lost`, `power_cycle`, ...);
- a Power Supply's `Power Supply AC lost`, `Failure detected`, `Redundancy Lost` (one supply
  of several: the node runs on) -> `state: degraded`; their deassertion, or Redfish's "The
  input power for power supply 1 has been restored." -> `on` of that supply (`degraded`
  ends);
- Redfish `Message`s: "The system is powered off" / "Server power is off" -> `off`, "The
  power input for power supply N is lost" -> `degraded`, "... restored" -> `on`.

Other SEL records (fans, memory, firmware progress) are not power: skipped, and counted as
lines no record used. ipmitool prints the BMC's local time (`--tz`); a record without a date
(`Pre-Init`) is stamped when read (`time_source: observed`). A BMC's log does not name its
host: the node is the shipper's (`--node`), else every record is a dead letter naming
`node`. Entity: the node; the sensor and the SEL record id are attributes.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

from ingest.base import Adapter, Context, Reject, is_json_document, raw_evidence
from ingest.redact import clip

_SEL = re.compile(r"^\s*(?P<id>[0-9a-fA-F]{1,8})\s*\|\s*(?P<date>[^|]{1,20}?)\s*\|\s*"
                  r"(?P<time>[^|]{1,20}?)\s*\|\s*(?P<rest>.+?)\s*$")
_DATES = ("%m/%d/%Y", "%b-%d-%Y", "%Y-%m-%d")
_TIMES = ("%H:%M:%S", "%I:%M:%S %p")

# (pattern on the event text, the sensor must be a power unit?, state, cause)
_POWER_EVENTS: list[tuple[re.Pattern[str], str, str, str]] = [
    (re.compile(r"power off|power down|powered off|power is off", re.I), "unit", "off",
     "power_down"),
    (re.compile(r"\bpower cycle\b", re.I), "unit", "off", "power_cycle"),
    (re.compile(r"soft[- ]power control failure", re.I), "unit", "off", "power_control"),
    (re.compile(r"\bAC lost\b|input (?:power )?(?:was |is )?lost|power input .{0,40}lost|"
                r"input lost", re.I), "any", "lost", "ac_lost"),
    (re.compile(r"failure detected|predictive failure|power supply .{0,20}fail", re.I),
     "supply", "lost", "psu_failure"),
    (re.compile(r"redundancy (?:is )?lost|non-redundant", re.I), "supply", "lost",
     "redundancy_lost"),
    (re.compile(r"(?:input )?power .{0,40}(?:has been )?restored|power on\b|powered on",
                re.I), "any", "on", "restored"),
]


def _sensor_kind(sensor: str) -> str:
    low = sensor.lower()
    if "power unit" in low or "pwr unit" in low or "system power" in low:
        return "unit"
    if "power supply" in low or re.search(r"\bps\d|\bpsu", low):
        return "supply"
    return ""


def classify(sensor: str, text: str, asserted: bool | None) -> tuple[str, str] | None:
    """(state, cause) of a BMC record, or None when it is not about power. A supply's loss
    leaves the node running on the others (`degraded`); a power unit's is the node's
    (`off`); a deassertion ends what its assertion started."""
    kind = _sensor_kind(sensor)
    for pattern, needs, state, cause in _POWER_EVENTS:
        if not pattern.search(text):
            continue
        if needs == "unit" and kind == "supply":
            continue
        if needs == "supply" and kind != "supply":
            continue
        if not kind and needs == "any" and not re.search(r"power|\bAC\b", text, re.I):
            continue
        if state == "lost":
            state = "off" if kind == "unit" else "degraded"
        if asserted is False and state != "on":
            return "on", "restored"
        return state, cause
    return None


def _sel_time(date: str, clock: str, ctx: Context) -> tuple[str, str]:
    from ingest.timestamps import local_time

    for dfmt in _DATES:
        for tfmt in _TIMES:
            try:
                when = datetime.strptime(f"{date.strip()} {clock.strip()}", f"{dfmt} {tfmt}")
            except ValueError:
                continue
            return local_time(when.isoformat(), ctx), "line"
    return ctx.observed_at.isoformat(), "observed"


def _record(node: str, time: str, source: str, state: str, cause: str, sensor: str,
            record: str, message: str, raw: str) -> dict[str, Any]:
    severity = {"off": "critical", "degraded": "warning"}.get(state, "info")
    return {"type": "node.power", "time": time, "scope": "node", "entity": node, "node": node,
            "severity": severity, "message": clip(message, 500),
            "attributes": {"state": state, "cause": cause, "sensor": clip(sensor, 120),
                           "record": record, "time_source": source, "raw": raw_evidence(raw)}}


def _sel_lines(text: str, ctx: Context) -> list[dict[str, Any] | Reject]:
    out: list[dict[str, Any] | Reject] = []
    for line in text.splitlines():
        m = _SEL.match(line)
        if not m:
            continue
        cells = [c.strip() for c in m.group("rest").split("|")]
        # ipmitool: sensor | event | Asserted; FreeIPMI: name | type | state | event
        asserted: bool | None = None
        if cells and cells[-1].lower() in ("asserted", "deasserted"):
            asserted = cells[-1].lower() == "asserted"
            cells = cells[:-1]
        if len(cells) < 2:
            continue
        sensor, event = cells[0], cells[-1]
        if len(cells) >= 3:
            sensor = f"{cells[0]} ({cells[1]})"
        found = classify(sensor, event, asserted)
        if found is None:
            continue
        if not ctx.node:
            out.append(Reject("node", "a BMC's event log does not name its host and none was "
                              "given by the shipper (--node)", raw_evidence(line)))
            continue
        time, source = _sel_time(m.group("date"), m.group("time"), ctx)
        said = "" if asserted is None else (" Asserted" if asserted else " Deasserted")
        out.append(_record(ctx.node, time, source, *found, sensor, m.group("id"),
                           f"{sensor}: {event}{said}", line))
    return out


def _entries(doc: Any) -> list[dict[str, Any]]:
    if isinstance(doc, list):
        return [e for e in doc if isinstance(e, dict)]
    if not isinstance(doc, dict):
        return []
    for key in ("Members", "Events"):
        if isinstance(doc.get(key), list):
            return [e for e in doc[key] if isinstance(e, dict)]
    return [doc]


def _redfish(doc: Any, ctx: Context) -> list[dict[str, Any] | Reject]:
    out: list[dict[str, Any] | Reject] = []
    for entry in _entries(doc):
        message = entry.get("Message")
        if not isinstance(message, str):
            continue
        sensor = entry.get("SensorType")
        if isinstance(sensor, list):  # iDRAC 7/8 print [{"Member": "..."}]
            sensor = " ".join(str(s.get("Member", "")) for s in sensor if isinstance(s, dict))
        code = entry.get("EntryCode")
        if isinstance(code, list):
            code = " ".join(str(c.get("Member", "")) for c in code if isinstance(c, dict))
        asserted = False if isinstance(code, str) and code.lower().startswith("deassert") \
            else None
        found = classify(str(sensor or ""), message, asserted)
        if found is None:
            continue
        if not ctx.node:
            out.append(Reject("node", "a BMC's event log does not name its host and none was "
                              "given by the shipper (--node)", raw_evidence(entry)))
            continue
        when = entry.get("Created") or entry.get("EventTimestamp")
        source = "line" if isinstance(when, str) and when else "observed"
        time = when if source == "line" else ctx.observed_at.isoformat()
        out.append(_record(ctx.node, str(time), source, *found, str(sensor or ""),
                           str(entry.get("Id") or entry.get("EventId") or ""), message,
                           json.dumps(entry, sort_keys=True)))
    return out


def parse(text: str, ctx: Context) -> list[dict[str, Any] | Reject]:
    if is_json_document(text):
        return _redfish(json.loads(text), ctx)
    return _sel_lines(text, ctx)


ADAPTER = Adapter("ipmi", parse, doc="BMC power events: ipmitool sel list/elist, ipmi-sel, "
                  "Redfish LogEntry (Logs/Sel) -> node.power", line_oriented=True)
