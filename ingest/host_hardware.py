"""The host's own hardware in its kernel log (part of the `node-log` adapter): PCIe Advanced
Error Reporting and the memory controllers' EDAC. Their class is `host_hardware` (owned by
hardware ops, `processors/incidents/rules.yaml`).

- PCIe AER, a report over several lines: `pcieport 0000:00:1c.5: AER: Corrected error
  received: 0000:00:1c.5` (newer kernels: `AER: Correctable error message received from`,
  `AER: Multiple Corrected error received`), then `PCIe Bus Error: severity=Corrected,
  type=Physical Layer, (Receiver ID)`, `device [8086:9d15] error status/mask=...` and the
  error bits (`[ 0] RxErr`);
- EDAC: `EDAC MC0: 1 CE memory read error on CPU_SrcID#0_Ha#0_Chan#2_DIMM#0 (channel:2
  slot:0 ...)`, `EDAC MC0: 4 CE error on CPU#0Channel#2_DIMM#0 (...)`; `... UE ...` for an
  uncorrected one. The `EDAC sbridge MC0: HANDLING MCE MEMORY ERROR` block around it is
  its detail, and `EDAC amd64: ... DRAM ECC disabled` is set-up, not an error.

Corrected errors come in floods: all the corrected reports of one device (one DIMM) within
a minute are one `node.health` (`status: warning`, `count`: reports or errors), the
warning-level signal a flood is. An uncorrected or fatal AER report, an EDAC UE, is an event
of its own (`status: failure`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from ingest.base import raw_evidence
from ingest.redact import clip

_PCI = r"(?<![0-9a-f:])[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]"
_AER_SEVERITY = re.compile(r"(?P<port>" + _PCI + r"): (?:AER: )?PCIe Bus Error: severity="
                           r"(?P<sev>Corrected|Correctable|Uncorrected|Uncorrectable)"
                           r"(?: \((?P<fatal>Fatal|Non-Fatal)\))?, type=(?P<type>[^,]{1,60})",
                           re.I)
_AER_RECEIVED = re.compile(r"(?P<port>" + _PCI + r"): AER: (?:Multiple )?(?P<sev>Corrected|"
                           r"Correctable|Uncorrected|Uncorrectable)\b[^\n]{0,80}?(?:received"
                           r"|message)[^\n]{0,40}?(?P<dev>" + _PCI + r")?", re.I)
_AER_DEVICE = re.compile(r"(?P<port>" + _PCI + r"):(?: AER:)?\s+device \[(?P<id>[0-9a-f]{4}:"
                         r"[0-9a-f]{4})\] error status/mask=(?P<status>\w+)/(?P<mask>\w+)")
_AER_BIT = re.compile(r"(?P<port>" + _PCI + r"):(?: AER:)?\s+\[\s?(?P<bit>\d{1,2})\s?\] "
                      r"(?P<name>\w[\w ]{0,40}?)\s*(?:\(First\))?\s*$")
_EDAC = re.compile(r"EDAC (?P<mc>MC\d{1,3}): (?P<n>\d{1,12}) (?P<kind>CE|UE) (?P<what>[\w ]{0,60}?)"
                   r"\s?(?:error )?on (?P<label>[\w#]{1,120})(?: \((?P<detail>[^\n]{0,400}))?")


def _evidence(record: dict[str, Any], line: str) -> None:
    """One more line of a report (or a flood) on its evidence, while it fits."""
    raw = str(record["attributes"]["raw"])
    if len(raw) + len(line) < 3500:
        record["attributes"]["raw"] = raw_evidence(f"{raw}\n{line}")


class HostHardware:
    """The AER and EDAC reports of one payload, corrected floods folded."""

    def __init__(self, when: Callable[[str], tuple[str, str, str]], node: str) -> None:
        self.when = when
        """(time, host, time_source) of a line."""
        self.node = node
        self.records: list[dict[str, Any]] = []
        self.floods: dict[tuple[str, str, str, str], dict[str, Any]] = {}
        self.last: dict[str, dict[str, Any]] = {}
        """The report each PCIe port is printing, for its detail lines."""

    def read(self, line: str) -> bool:
        """Whether `line` is (part of) an AER or EDAC report; then it is recorded."""
        if "PCIe Bus Error" in line and (m := _AER_SEVERITY.search(line)):
            self._aer(line, m)
            return True
        if "AER" in line and (m := _AER_RECEIVED.search(line)):
            return True  # the header of the report its next line details
        if "error status/mask" in line and (m := _AER_DEVICE.search(line)):
            if (held := self.last.get(m["port"])) is not None:
                held["attributes"].setdefault("device_id", m["id"])
                held["attributes"].setdefault("error_status", m["status"])
                _evidence(held, line)
            return True
        if "pcieport" in line and (m := _AER_BIT.search(line)):
            if (held := self.last.get(m["port"])) is not None:
                errors = held["attributes"].setdefault("errors", [])
                if m["name"].strip() not in errors and len(errors) < 32:
                    errors.append(m["name"].strip())
                _evidence(held, line)
            return True
        if "EDAC" in line and (m := _EDAC.search(line)):
            self._edac(line, m)
            return True
        return False

    def _aer(self, line: str, m: re.Match[str]) -> None:
        corrected = m["sev"].lower().startswith("correct")
        fatal = (m["fatal"] or "").lower() == "fatal"
        pci = m["port"].lower()
        attrs: dict[str, Any] = {
            "system": "pcie_aer", "status": "warning" if corrected else "failure",
            "class": "host_hardware", "pci": pci, "aer_severity": "corrected" if corrected
            else "fatal" if fatal else "uncorrected", "layer": m["type"].strip(), "count": 1}
        record = self._record(line, attrs, f"pci-{pci}",
                              "warning" if corrected else "critical" if fatal else "error",
                              key=(pci, "aer") if corrected else None)
        self.last[m["port"]] = record

    def _edac(self, line: str, m: re.Match[str]) -> None:
        corrected = m["kind"] == "CE"
        attrs: dict[str, Any] = {
            "system": "edac", "status": "warning" if corrected else "failure",
            "class": "host_hardware", "memory_controller": m["mc"], "dimm": m["label"],
            "edac_kind": m["kind"].lower(), "count": int(m["n"])}
        if m["what"].strip():
            attrs["error"] = m["what"].strip()
        self._record(line, attrs, f"{m['mc'].lower()}/{m['label']}",
                     "warning" if corrected else "critical",
                     key=(m["label"], "edac") if corrected else None)

    def _record(self, line: str, attrs: dict[str, Any], part: str, severity: str,
                key: tuple[str, str] | None) -> dict[str, Any]:
        time, host, source = self.when(line)
        node = host or self.node
        if key is not None:
            flood = (node, *key, time[:16])
            if (held := self.floods.get(flood)) is not None:
                held["attributes"]["count"] += attrs["count"]
                _evidence(held, line)
                return held
        record = {"type": "node.health", "time": time, "scope": "node",
                  "entity": f"{node}/{part}" if node else part, "node": node or None,
                  "severity": severity, "message": clip(line.strip(), 500),
                  "attributes": {**attrs, "time_source": source, "raw": raw_evidence(line)}}
        if key is not None:
            self.floods[(node, *key, time[:16])] = record
        self.records.append(record)
        return record
