"""Slurm's text tools: `sacct --parsable2`, `squeue` (default or custom `--format` with its
header) and `sinfo` (default and `-R`).

- sacct (`-P`/`--parsable2`, or `--parsable` with its trailing `|`): the header names the
  columns; each job row is rewritten into the sacct JSON shape and read by the same code as
  `sacct --json`, so both give the same events and ids. Step rows (`123.batch`, `123.0`)
  are skipped. `State` like `CANCELLED by 1000` is the state and its reason; a NODE_FAIL
  without an end time is stamped at its start.
- squeue: `PD` rows -> `job.pending` with the `(Reason)`; `R` rows -> `job.started` on the
  nodes. squeue prints no times by default: a pending row is stamped when read
  (`time_source: observed`), a running one at read time minus its `TIME` (`relative`);
  with a `START_TIME` or `SUBMIT_TIME` column the line's own time is used. Ids do not
  depend on the read time, so the same snapshot read twice, or every minute, is one event.
- sinfo: rows in a down or drained state -> `node.not_ready` / `node.drained` per node
  (stamped when read); `sinfo -R` rows (`REASON USER TIMESTAMP NODELIST`) -> `node.drained`
  with the reason at its TIMESTAMP.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from ingest.base import Adapter, Context, Reject, raw_evidence
from ingest.canonical import ParseError
from ingest.redact import clip
from ingest.slurm import expand_hostlist
from ingest.slurm_text import text_job_records

_SACCT_FIELDS = {"JobID": "JobId", "JobName": "JobName", "Partition": "Partition",
                 "Account": "Account", "User": "UserId", "NodeList": "NodeList",
                 "NNodes": "NumNodes", "Submit": "SubmitTime", "Start": "StartTime",
                 "End": "EndTime", "ExitCode": "ExitCode", "AllocTRES": "TRES",
                 "ReqTRES": "ReqTRES", "Cluster": "ClusterName", "Reason": "Reason"}


def parse_sacct(text: str, ctx: Context) -> list[dict[str, Any] | Reject]:
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines or "|" not in lines[0] or "JobID" not in lines[0].split("|"):
        raise ParseError("header", "expected `sacct --parsable2` output with its header line "
                         "(JobID|...|State|...)")
    header = lines[0].rstrip("|").split("|")
    if "State" not in header:
        raise ParseError("header", "sacct output needs the State column")
    out: list[dict[str, Any] | Reject] = []
    for i, row in enumerate(lines[1:], start=1):
        values = row.rstrip("|").split("|") if row.endswith("|") and len(
            row.split("|")) > len(header) else row.split("|")
        if len(values) != len(header):
            out.append(Reject("row", f"{len(values)} columns, the header has {len(header)}",
                              raw_evidence(row), f"{ctx.origin}:{i + 1}"))
            continue
        row_fields = dict(zip(header, values, strict=True))
        job = row_fields.get("JobID", "")
        if "." in job:
            continue  # a step of the job above it
        state, _, why = row_fields.get("State", "").partition(" ")
        fields = {ours: row_fields[theirs] for theirs, ours in _SACCT_FIELDS.items()
                  if row_fields.get(theirs)}
        fields["JobState"] = state
        if why and not fields.get("Reason"):
            fields["Reason"] = why.replace("by ", "cancelled by uid ", 1) \
                if why.startswith("by ") else why  # `CANCELLED by 1000`
        out.extend(text_job_records(fields, i, ctx, row))
    return out


_ELAPSED = re.compile(r"^(?:(?P<d>\d+)-)?(?:(?P<h>\d+):)?(?P<m>\d+):(?P<s>\d+)$")


def _elapsed(text: str) -> timedelta | None:
    m = _ELAPSED.match(text.strip())
    if not m:
        return None
    return timedelta(days=int(m["d"] or 0), hours=int(m["h"] or 0), minutes=int(m["m"]),
                     seconds=int(m["s"]))


def _columns(lines: list[str], required: tuple[str, ...]) -> list[str] | None:
    head = lines[0].split() if lines else []
    return head if all(r in head for r in required) else None


def parse_squeue(text: str, ctx: Context) -> list[dict[str, Any] | Reject]:
    from ingest.timestamps import local_time

    lines = [line for line in text.splitlines() if line.strip()]
    head = _columns(lines, ("JOBID",))
    if head is None or not ({"ST", "STATE"} & set(head)):
        raise ParseError("header", "expected squeue output with its header (JOBID ... ST ...)")
    if not ctx.project:
        return [Reject("project", "squeue rows name no project: ship them with the "
                       "cluster's project (--project / X-Jobtrail-Project)",
                       raw_evidence(clip(text, 1000)))]
    out: list[dict[str, Any] | Reject] = []
    for number, row in enumerate(lines[1:], start=2):
        values = row.split(None, len(head) - 1)
        if len(values) != len(head):
            out.append(Reject("row", "fewer columns than the header", raw_evidence(row),
                              f"{ctx.origin}:{number}"))
            continue
        col = dict(zip(head, values, strict=True))
        job, state = col["JOBID"], col.get("ST") or col.get("STATE", "")
        where = col.get("NODELIST(REASON)") or col.get("NODELIST") or col.get("REASON", "")
        base: dict[str, Any] = {"project": ctx.project, "job_id": job,
                                "message": clip(row.strip(), 500)}
        if ctx.attempt is not None:
            base["attempt"] = ctx.attempt
        attributes: dict[str, Any] = {"raw": raw_evidence(row)}
        if state in ("PD", "PENDING"):
            reason = where.strip("()") or "None"
            when, source = ctx.observed_at.isoformat(), "observed"
            if col.get("SUBMIT_TIME") not in (None, "N/A"):
                when, source = local_time(col["SUBMIT_TIME"], ctx), "line"
            out.append({**base, "id": f"squeue-{ctx.cluster}-{job}-pending-{reason}",
                        "type": "job.pending", "time": when, "severity": "info",
                        "attributes": {**attributes, "reason": reason,
                                       "queue": col.get("PARTITION"), "time_source": source}})
        elif state in ("R", "RUNNING"):
            nodes = expand_hostlist(where) if where and not where.startswith("(") else []
            start, source = None, "relative"
            if col.get("START_TIME") not in (None, "N/A"):
                start, source = local_time(col["START_TIME"], ctx), "line"
            elif (ran := _elapsed(col.get("TIME", ""))) is not None:
                start = (ctx.observed_at - ran).isoformat()
            out.append({**base, "id": f"squeue-{ctx.cluster}-{job}-started",
                        "type": "job.started", "time": start or ctx.observed_at.isoformat(),
                        "severity": "info",
                        "attributes": {**attributes, "nodes": nodes,
                                       "time_source": source if start else "observed"}})
    return out


_DOWN = ("down", "fail", "failing", "no_respond", "not_responding")
_DRAIN = ("drain", "drng", "drained", "draining")


def _sinfo_json(doc: dict[str, Any], ctx: Context) -> list[dict[str, Any] | Reject]:
    """`sinfo --json` (entries with `node.state`, `nodes.nodes` and `reason`), or the older
    node list (`nodes: [{name, state, reason, reason_changed_at}]`)."""
    from datetime import UTC, datetime

    from ingest.slurm import _number

    rows: list[tuple[list[str], list[str], str, Any]] = []
    for entry in doc.get("sinfo") or []:
        if not isinstance(entry, dict):
            continue
        state = (entry.get("node") or {}).get("state") or []
        names = (entry.get("nodes") or {}).get("nodes") or []
        reason = entry.get("reason") or {}
        rows.append(([str(x) for x in (state if isinstance(state, list) else [state])],
                     [str(n) for n in names], str(reason.get("description") or ""),
                     reason.get("time")))
    for node in doc.get("nodes") or []:
        if isinstance(node, dict) and (node.get("name") or node.get("hostname")):
            state = node.get("state") or []
            rows.append(([str(x) for x in (state if isinstance(state, list) else [state])],
                         [str(node.get("name") or node.get("hostname"))],
                         str(node.get("reason") or ""), node.get("reason_changed_at")))
    out: list[dict[str, Any] | Reject] = []
    for states, names, reason, changed in rows:
        lower = {x.lower() for x in states}
        type_ = "node.not_ready" if lower & set(_DOWN) else "node.drained" if lower & set(
            _DRAIN) else None
        if type_ is None:
            continue
        at = _number(changed)
        when, source = (datetime.fromtimestamp(at, tz=UTC).isoformat(), "line") if at \
            else (ctx.observed_at.isoformat(), "observed")
        for node in names:
            out.append({"type": type_, "time": when, "scope": "node", "entity": node,
                        "node": node, "severity": "error" if type_ == "node.not_ready"
                        else "warning", "message": clip(f"{node} {'+'.join(states)} {reason}",
                                                        500),
                        "attributes": {"reason": clip(reason or "+".join(states), 200),
                                       "state": "+".join(states), "time_source": source,
                                       "raw": raw_evidence({"node": node, "state": states,
                                                            "reason": reason})}})
    return out


def parse_sinfo(text: str, ctx: Context) -> list[dict[str, Any] | Reject]:
    if text.lstrip().startswith("{"):
        from ingest.base import json_object

        return _sinfo_json(json_object(text, "sinfo --json output"), ctx)
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise ParseError("header", "empty sinfo output")
    if _columns(lines, ("REASON", "TIMESTAMP", "NODELIST")):
        return _sinfo_reasons(lines, ctx)
    head = _columns(lines, ("STATE", "NODELIST"))
    if head is None:
        raise ParseError("header", "expected sinfo output with its header (... STATE "
                         "NODELIST), or sinfo -R (REASON USER TIMESTAMP NODELIST)")
    out: list[dict[str, Any] | Reject] = []
    for row in lines[1:]:
        values = row.split()
        if len(values) != len(head):
            continue
        col = dict(zip(head, values, strict=True))
        state = col["STATE"].rstrip("*~#!%$@^-+").lower()
        type_ = "node.not_ready" if state in _DOWN else "node.drained" if state in _DRAIN \
            else None
        if type_ is None:
            continue
        for node in expand_hostlist(col["NODELIST"]):
            out.append({"id": f"sinfo-{ctx.cluster}-{node}-{state}", "type": type_,
                        "time": ctx.observed_at.isoformat(), "scope": "node", "entity": node,
                        "node": node, "severity": "error" if type_ == "node.not_ready"
                        else "warning", "message": clip(row.strip(), 500),
                        "attributes": {"reason": col["STATE"], "time_source": "observed",
                                       "partition": col.get("PARTITION"),
                                       "raw": raw_evidence(row)}})
    return out


def _sinfo_reasons(lines: list[str], ctx: Context) -> list[dict[str, Any] | Reject]:
    """`sinfo -R`: REASON is free text, so columns are cut where the header's words start."""
    from ingest.timestamps import local_time

    header = lines[0]
    starts = [header.index(name) for name in ("USER", "TIMESTAMP", "NODELIST")]
    out: list[dict[str, Any] | Reject] = []
    for number, row in enumerate(lines[1:], start=2):
        reason = row[:starts[0]].strip()
        stamp = row[starts[1]:starts[2]].strip()
        nodes = row[starts[2]:].strip()
        if not (reason and nodes):
            out.append(Reject("row", "no reason or node list", raw_evidence(row),
                              f"{ctx.origin}:{number}"))
            continue
        try:
            when, source = local_time(stamp, ctx), "line"
        except ValueError:
            when, source = ctx.observed_at.isoformat(), "observed"
        for node in expand_hostlist(nodes):
            out.append({"type": "node.drained", "time": when, "scope": "node", "entity": node,
                        "node": node, "severity": "warning", "message": clip(row.strip(), 500),
                        "attributes": {"reason": clip(reason, 200), "time_source": source,
                                       "user": row[starts[0]:starts[1]].strip(),
                                       "raw": raw_evidence(row)}})
    return out


SACCT = Adapter("sacct", parse_sacct, doc="Slurm `sacct --parsable2` text", line_oriented=True)
SQUEUE = Adapter("squeue", parse_squeue, doc="Slurm `squeue` text (default or --format with "
                 "its header)", line_oriented=True)
SINFO = Adapter("sinfo", parse_sinfo, doc="Slurm `sinfo` text and `sinfo -R`",
                line_oriented=True)
