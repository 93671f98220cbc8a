"""LBNL Node Health Check (NHC, mej/nhc) in a node's log (part of the `node-log` adapter).

- `ERROR:  nhc:  Health check failed:  check_hw_ib:  No IB port is ACTIVE (LinkUp 100
  Gb/sec).` (nhc.log, the console; syslog's `nhc[1013622]: Health check failed:  ...`) ->
  `node.health` (`source: nhc`, `check`, `system` from the check: `check_nv_*`/`*xid*` gpu,
  `check_hw_ib`/`check_hw_eth` network, `check_fs_*` filesystem, `check_hw_cpuinfo`/
  `_physmem`/`_mem*` host; a script timeout or NHC killed: `status: warning`);
- the helper's invocation `20190409 13:20:33 /usr/libexec/nhc/node-mark-offline b001
  check_hw_ib:  No IB port ...` is the same failure, on that node, at that time (NHC's own
  `YYYYMMDD HH:MM:SS`, local time: `--tz`); the failure is one event however often NHC
  printed it;
- `node-mark-offline:  Marking idle b001 offline:  NHC: check_...` -> `node.drained` (the
  note is the reason; an Xid in it is `xid`), `node-mark-online:  Marking b001 online and
  clearing note (...)` -> `node.ready`. A helper that did not act (`Not sure how to handle
  node state`, `Not offlining`, `Skipping`, `is already online`) is no event.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from ingest.base import raw_evidence
from ingest.redact import clip

_FAILED = re.compile(r"(?:ERROR:\s+nhc:\s+|\bnhc(?:\[\d{1,10}\])?:\s+)?Health check failed:\s+"
                     r"(?P<note>[^\n]{1,600})")
_INVOKED = re.compile(r"^(?P<date>\d{8}) (?P<hms>\d\d:\d\d:\d\d) (?:\[\w{1,20}\] )?\S{0,200}?"
                      r"node-mark-(?P<what>offline|online) (?P<node>[\w.-]{1,200})"
                      r"(?: (?P<note>[^\n]{1,600}))?$")
_MARKED = re.compile(r"node-mark-(?P<what>offline|online):\s+Marking (?:\S{1,40} )?"
                     r"(?P<node>[\w.-]{1,200}) (?:offline|online)(?::\s+| and clearing note "
                     r"\()(?P<note>[^\n]{0,600}?)\)?\s*$")
_PROMPT = re.compile(r"^\[?[\w.-]{1,64}@(?P<host>[\w.-]{1,200})[ :~\]][^\n]{0,200}[#$] nhc\b")
_CHECK = re.compile(r"\b(?P<check>check_\w{1,80})")
_XID = re.compile(r"\bX[Ii][Dd](?: errors?)?:? (?P<xid>\d{1,3})\b")
_SYSTEMS = (("nv", "gpu"), ("gpu", "gpu"), ("xid", "gpu"), ("dcgm", "gpu"),
            ("hw_ib", "network"), ("hw_eth", "network"), ("net", "network"),
            ("fs", "filesystem"), ("file", "filesystem"), ("hw_cpu", "host"),
            ("hw_physmem", "host"), ("hw_mem", "host"), ("hw_swap", "host"),
            ("hw_mcelog", "host"), ("ps", "process"), ("dmi", "host"))
_CLASS = {"gpu": "gpu_hardware", "network": "network", "filesystem": "storage_io",
          "host": "host_hardware"}


def _note(text: str) -> str:
    return " ".join(text.split()).rstrip()


def _system(check: str) -> str:
    name = check.removeprefix("check_")
    return next((system for prefix, system in _SYSTEMS if name.startswith(prefix)
                 or f"_{prefix}" in name), "nhc")


class Nhc:
    """NHC's lines of one payload: one failure once, its helper's drain and return."""

    def __init__(self, when: Callable[[str], tuple[str, str, str]], node: str,
                 local: Callable[[str], str]) -> None:
        self.when = when
        self.node = node
        self.local = local
        """A zone-less `YYYY-MM-DD HH:MM:SS` in the shipper's zone, as ISO UTC."""
        self.records: list[dict[str, Any]] = []
        self.failures: dict[tuple[str, str], dict[str, Any]] = {}
        self.invoked: dict[tuple[str, str], str] = {}
        """When each helper was run, by (offline|online, node): its result line has no time."""
        self.xid: int | None = None

    def read(self, line: str) -> bool:
        """Whether `line` is NHC's; then what it says is recorded."""
        if (prompt := _PROMPT.match(line)) is not None:
            self.node = prompt["host"]  # `[root@b001 ~]# nhc`: what follows is b001's
            return False
        if "XID errors" in line and (x := _XID.search(line)):
            self.xid = int(x["xid"])
            return True
        if "node-mark-" in line:
            if m := _INVOKED.search(line.strip()):
                when = self.local(f"{m['date'][:4]}-{m['date'][4:6]}-{m['date'][6:]} "
                                  f"{m['hms']}")
                self.invoked[(m["what"], m["node"].rstrip("."))] = when
                if m["what"] == "offline" and m["note"]:
                    self._failure(line, _note(m["note"]), m["node"].rstrip("."), when,
                                  "line")
                return True
            if m := _MARKED.search(line):
                self._marked(line, m)
                return True
            return "node-mark-" in line and ("Not " in line or "Skipping" in line
                                             or "already online" in line)
        if "Health check failed" in line and (m := _FAILED.search(line)):
            time, host, source = self.when(line)
            self._failure(line, _note(m["note"]), host or self.node, time, source)
            return True
        return False

    def _failure(self, line: str, note: str, node: str, time: str, source: str) -> None:
        key = (node, note.removeprefix("NHC: "))
        held = self.failures.get(key) or self.failures.get((self.node, key[1]))
        if held is not None:
            if held["attributes"]["time_source"] == "observed" and source != "observed":
                held["time"], held["attributes"]["time_source"] = time, source
            if node and held["node"] != node:  # the helper names the node the console did not
                held.update(node=node, entity=node)
                self.failures[key] = held
            return  # NHC printed the same failure again (console, nhc.log, the helper)
        check = _CHECK.search(note)
        name = check["check"] if check else "nhc"
        timeout = "timed out" in note or "Terminated by signal" in note
        system = "nhc" if timeout else _system(name)
        attrs: dict[str, Any] = {
            "system": system, "status": "warning" if timeout else "failure", "check": name,
            "source": "nhc", "detail": clip(note, 300), "time_source": source,
            "raw": raw_evidence(line)}
        if system in _CLASS:
            attrs["class"] = _CLASS[system]
        xid = _XID.search(note)
        if xid or (self.xid is not None and "xid" in name.lower()):
            attrs["xid"] = int(xid["xid"]) if xid else self.xid
        record = {"type": "node.health", "time": time, "scope": "node", "entity": node,
                  "node": node or None, "severity": "warning" if timeout else "error",
                  "message": clip(note, 500), "attributes": attrs}
        self.failures[key] = record
        self.records.append(record)

    def _marked(self, line: str, m: re.Match[str]) -> None:
        node = m["node"].rstrip(".")
        note = _note(m["note"] or "")
        key = (node, note.removeprefix("NHC: "))
        failure = self.failures.get(key)
        time, _, source = self.when(line)
        if (invoked := self.invoked.get((m["what"], node))) is not None:
            time, source = invoked, "line"  # the helper prints no time: its invocation's
        elif failure is not None:
            time, source = failure["time"], failure["attributes"]["time_source"]
        offline = m["what"] == "offline"
        attrs: dict[str, Any] = {"reason": clip(note, 200) or "NHC", "source": "nhc",
                                 "time_source": source, "raw": raw_evidence(line)}
        if offline and (xid := _XID.search(note)):
            attrs["xid"] = int(xid["xid"])
        self.records.append({
            "type": "node.drained" if offline else "node.ready", "time": time,
            "scope": "node", "entity": node, "node": node,
            "severity": "warning" if offline else "info", "message": clip(line.strip(), 500),
            "attributes": attrs})
