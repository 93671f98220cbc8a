"""`scontrol show node` text (the scontrol adapter): what a node's record says is wrong.

One record per `NodeName=` line and the indented lines after it. The state is the base state
and its flags (`IDLE+DRAIN`, `DOWN+NOT_RESPONDING`, `MIXED+DRAIN+FAIL`):

- `DRAIN` (draining or drained) -> `node.drained`;
- `DOWN`, `FAIL` or `NOT_RESPONDING` (not drained) -> `node.not_ready`;
- any other state is no event: a record is a snapshot, and a healthy node changed nothing.

The reason is the `Reason=` line (the whole line: reasons have spaces); the `[slurm@<time>]`
Slurm appends says who set it and when (slurmctld's local time: `--tz`): that is the event's
time. Without it, the time the output was read (`time_source: observed`). A drain reason
naming an Xid (NHC's) carries `xid`.
"""

from __future__ import annotations

import re
from typing import Any

from ingest.base import Context, Reject, raw_evidence
from ingest.redact import clip

_NODE = re.compile(r"^\s*NodeName=(?P<node>[\w.-]+)")
_STATE = re.compile(r"(?:^|\s)State=(?P<state>[A-Z_+*]+)")
_REASON = re.compile(r"^\s*Reason=(?P<reason>.*?)(?: \[(?P<who>[^@\]\s]{1,64})@"
                     r"(?P<at>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\])?\s*$")
_XID = re.compile(r"\bXid\b\D{0,3}(?P<xid>\d{1,4})", re.I)


def records(text: str) -> list[tuple[int, list[str]]]:
    """(first line number, lines) of each `NodeName=` record."""
    out: list[tuple[int, list[str]]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if _NODE.match(line):
            out.append((number, [line]))
        elif line.strip() and out:
            out[-1][1].append(line)
    return out


def parse(text: str, ctx: Context) -> list[dict[str, Any] | Reject]:
    from ingest.timestamps import local_time

    out: list[dict[str, Any] | Reject] = []
    for number, lines in records(text):
        node = _NODE.match(lines[0]).group("node")  # type: ignore[union-attr]
        record = "\n".join(lines)
        state_m = next((m for line in lines if (m := _STATE.search(line))), None)
        ref = f"{ctx.origin}:{number}"
        if state_m is None:
            out.append(Reject("State", f"node {node}: no State=", raw_evidence(record), ref))
            continue
        flags = set(state_m.group("state").rstrip("*").split("+"))
        reason_m = next((m for line in lines if (m := _REASON.match(line))), None)
        reason = reason_m.group("reason").strip() if reason_m else ""
        if "DRAIN" in flags or "DRAINING" in flags or "DRAINED" in flags:
            type_, severity = "node.drained", "warning"
        elif flags & {"DOWN", "FAIL", "FAILING", "NOT_RESPONDING"} or state_m.group(
                "state").endswith("*"):
            type_, severity = "node.not_ready", "error"
            reason = reason or ("not responding" if "NOT_RESPONDING" in flags else "down")
        else:
            continue
        attrs: dict[str, Any] = {"reason": clip(reason or state_m.group("state").lower(), 200),
                                 "state": state_m.group("state"), "raw": raw_evidence(record)}
        if reason_m and reason_m.group("at"):
            when, source = local_time(reason_m.group("at"), ctx), "line"
            attrs["set_by"] = reason_m.group("who")
        else:
            when, source = ctx.observed_at.isoformat(), "observed"
        if xid := _XID.search(reason):
            attrs["xid"] = int(xid.group("xid"))
        attrs["time_source"] = source
        out.append({"type": type_, "time": when, "scope": "node", "entity": node, "node": node,
                    "severity": severity, "message": clip(f"{node} {state_m.group('state')} "
                                                          f"{reason}".strip(), 500),
                    "attributes": attrs})
    return out
