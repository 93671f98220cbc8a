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

from ingest import slurm_paste
from ingest.base import Adapter, Context, Reject, raw_evidence
from ingest.canonical import ParseError
from ingest.hostlist import HostlistError
from ingest.redact import clip
from ingest.slurm import expand_hostlist

_SACCT_FIELDS = {"JobID": "JobId", "JobName": "JobName", "Partition": "Partition",
                 "Account": "Account", "User": "UserId", "NodeList": "NodeList",
                 "NNodes": "NumNodes", "Submit": "SubmitTime", "Start": "StartTime",
                 "End": "EndTime", "ExitCode": "ExitCode", "AllocTRES": "TRES",
                 "ReqTRES": "ReqTRES", "Cluster": "ClusterName", "Reason": "Reason"}


_SACCT_NAMES = {name.lower(): name for name in (*_SACCT_FIELDS, "State", "DerivedExitCode")}
_TIMES = (("Submit", "submission"), ("Start", "start"), ("End", "end"))


def parse_sacct(text: str, ctx: Context) -> list[dict[str, Any] | Reject]:
    """sacct as printed: `-P`/`--parsable`/custom `--delimiter`, the default fixed-width
    table, `-n`, `-b`, a `--format` without JobID (the job from `-j`), after a prompt."""
    found = slurm_paste.table(text, "sacct", ("State",))
    if found is None or not (found.rows or found.bad):
        raise ParseError("header", "expected sacct output: `sacct -P`, the default table, "
                         "or rows under the `sacct ...` command that printed them")
    if "State" not in {_SACCT_NAMES.get(c.lower(), c) for c in found.columns}:
        raise ParseError("header", "sacct output needs the State column")
    only = found.flags.get("-j") or found.flags.get("--jobs") or ""
    out: list[dict[str, Any] | Reject] = []
    for i, (number, row, cells) in enumerate(found.rows, start=1):
        row_fields = {_SACCT_NAMES.get(k.lower(), k): v.strip() for k, v in cells.items()}
        job = row_fields.get("JobID") or (only if only.isdigit() else "")
        if not job:
            out.append(Reject("JobID", "a sacct row without a JobID column (and no single "
                              "`-j` job in the command)", raw_evidence(row),
                              f"{ctx.origin}:{number}"))
            continue
        if "." in job:
            continue  # a step of the job above it (`123.batch`, truncated `123.ba+`)
        row_fields["JobID"] = job
        state, _, why = row_fields.get("State", "").partition(" ")
        fields = {ours: row_fields[theirs] for theirs, ours in _SACCT_FIELDS.items()
                  if row_fields.get(theirs)}
        fields["JobState"] = state.rstrip("+")
        if why and not fields.get("Reason"):
            fields["Reason"] = why.replace("by ", "cancelled by uid ", 1) \
                if why.startswith("by ") else why  # `CANCELLED by 1000`
        out.extend(_untimed(fields, i, ctx, row))
    for number, row in found.bad:
        out.append(Reject("row", f"does not fit the {len(found.columns)} columns of the "
                          "header", raw_evidence(row), f"{ctx.origin}:{number}"))
    return out


def _untimed(fields: dict[str, str], i: int, ctx: Context, row: str
             ) -> list[dict[str, Any] | Reject]:
    """A job row; when its `--format` printed no time for its state, the state is still
    an event, stamped when read, naming the times it lacks (`missing_times`)."""
    from ingest.slurm import job_records
    from ingest.slurm_text import sacct_shape

    shape = sacct_shape(fields)
    times = shape["time"]
    missing = [name for name, key in _TIMES if times[key] is None]
    state = shape["state"]
    stamped = ""
    if state == "PENDING" and times["submission"] is None:
        times["submission"], stamped = int(ctx.observed_at.timestamp()), "job.pending"
    elif state not in ("PENDING", "RUNNING") and times["end"] is None and times["start"] is None:
        times["end"], stamped = int(ctx.observed_at.timestamp()), "terminal"
    out: list[dict[str, Any] | Reject] = []
    for draft in job_records(shape, i, ctx):
        if isinstance(draft, dict):
            draft["attributes"]["raw"] = raw_evidence(row)
            if stamped and draft["type"] == "job.submitted":
                continue  # its time was not in the row
            if stamped and draft["type"] not in ("job.submitted", "job.started"):
                draft["attributes"].update({"time_source": "observed",
                                            "missing_times": missing})
        out.append(draft)
    return out


_ELAPSED = re.compile(r"^(?:(?P<d>\d+)-)?(?:(?P<h>\d+):)?(?P<m>\d+):(?P<s>\d+)$")


def _elapsed(text: str) -> timedelta | None:
    m = _ELAPSED.match(text.strip())
    if not m:
        return None
    return timedelta(days=int(m["d"] or 0), hours=int(m["h"] or 0), minutes=int(m["m"]),
                     seconds=int(m["s"]))


def parse_squeue(text: str, ctx: Context) -> list[dict[str, Any] | Reject]:
    from ingest.timestamps import local_time

    found = slurm_paste.table(text, "squeue", ("JOBID",), slurm_paste.SQUEUE_DEFAULT)
    if found is None or not ({"ST", "STATE"} & {c.upper() for c in found.columns}) or not (
            found.rows or found.bad):
        raise ParseError("header", "expected squeue output with its header (JOBID ... ST ...) "
                         "or rows under the `squeue` command that printed them")
    if not ctx.project:
        return [Reject("project", "squeue rows name no project: ship them with the "
                       "cluster's project (--project / X-Jobtrail-Project)",
                       raw_evidence(clip(text, 1000)))]
    out: list[dict[str, Any] | Reject] = []
    for number, row in found.bad:
        out.append(Reject("row", "fewer columns than the header", raw_evidence(row),
                          f"{ctx.origin}:{number}"))
    for number, row, cells in found.rows:
        col = {k.upper(): v for k, v in cells.items()}
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
            nodes = _nodes(where, row, f"{ctx.origin}:{number}") \
                if where and not where.startswith("(") else []
            if isinstance(nodes, Reject):
                out.append(nodes)
                continue
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
    if not text.strip():
        raise ParseError("header", "empty sinfo output")
    reasons = slurm_paste.table(text, "sinfo", ("REASON", "NODELIST"))
    if reasons is not None and "REASON" in {c.upper() for c in reasons.columns}:
        return _sinfo_reasons(text, reasons, ctx)
    found = slurm_paste.table(text, "sinfo", ("STATE", "NODELIST"))
    if found is None or not {"STATE", "NODELIST"} <= {c.upper() for c in found.columns}:
        raise ParseError("header", "expected sinfo output with its header (... STATE "
                         "NODELIST), or sinfo -R (REASON USER TIMESTAMP NODELIST)")
    out: list[dict[str, Any] | Reject] = []
    when, source = _snapshot_time(text, ctx) or (ctx.observed_at.isoformat(), "observed")
    for number, row, cells in found.rows:
        col = {k.upper(): v for k, v in cells.items()}
        state = col["STATE"].rstrip("*~#!%$@^-+").lower()
        type_ = "node.not_ready" if state in _DOWN else "node.drained" if state in _DRAIN \
            else None
        if type_ is None:
            continue
        listed = _nodes(col["NODELIST"], row, f"{ctx.origin}:{number}", "NODELIST")
        if isinstance(listed, Reject):
            out.append(listed)
            continue
        for node in listed:
            out.append({"id": f"sinfo-{ctx.cluster}-{node}-{state}", "type": type_,
                        "time": when, "scope": "node", "entity": node,
                        "node": node, "severity": "error" if type_ == "node.not_ready"
                        else "warning", "message": clip(row.strip(), 500),
                        "attributes": {"reason": col["STATE"], "time_source": source,
                                       "partition": col.get("PARTITION"),
                                       "raw": raw_evidence(row)}})
    return out


def _sinfo_reasons(text: str, found: slurm_paste.Table,
                   ctx: Context) -> list[dict[str, Any] | Reject]:
    """`sinfo -R` (REASON USER TIMESTAMP NODELIST; REASON is free text, every other column
    one word) and `sinfo -R --Format=...` in any column order (cut where the header's words
    start)."""
    from ingest.timestamps import local_time

    columns = [c.upper() for c in found.columns]
    snapshot = _snapshot_time(text, ctx)
    rows: list[tuple[int, str, dict[str, str]]] = []
    if columns[0] == "REASON":
        rows = [(n, row, {k.upper(): v for k, v in cells.items()})
                for n, row, cells in found.rows]
    else:
        lines = slurm_paste.unwrap(text)
        header = lines[found.header_line - 1]
        starts = [m.start() for m in re.finditer(r"\S+", header)]
        for n, row, _cells in found.rows:
            words = row.split(None, len(columns) - 1)
            if columns[-1] == "REASON" and len(words) == len(columns):
                cut = words  # `sinfo -lNe`: one word a column (right-aligned), the reason last
            else:
                cut = [row[a:b].strip() for a, b in zip(starts, [*starts[1:], len(row) + 1],
                                                         strict=True)]
            rows.append((n, row, dict(zip(columns, cut, strict=True))))
    out: list[dict[str, Any] | Reject] = []
    for number, row in found.bad:
        out.append(Reject("row", "no reason or node list", raw_evidence(row),
                          f"{ctx.origin}:{number}"))
    for number, row, col in rows:
        reason = col.get("REASON", "")
        nodes = col.get("NODELIST", "")
        if not (reason and nodes):
            out.append(Reject("row", "no reason or node list", raw_evidence(row),
                              f"{ctx.origin}:{number}"))
            continue
        # `sinfo -lNe` and friends have a STATE beside the reason: a down node is not a drain,
        # and a node back in service with an old reason is no event
        state = col.get("STATE", "").rstrip("*~#!%$@^-+").lower()
        type_ = "node.drained" if not state or state in _DRAIN else \
            "node.not_ready" if state in _DOWN or col.get("STATE", "").endswith("*") else None
        if type_ is None:
            continue
        try:
            when, source = local_time(col.get("TIMESTAMP", ""), ctx), "line"
        except ValueError:
            when, source = snapshot or (ctx.observed_at.isoformat(), "observed")
        listed = _nodes(nodes, row, f"{ctx.origin}:{number}", "NODELIST")
        if isinstance(listed, Reject):
            out.append(listed)
            continue
        for node in listed:
            attrs = {"reason": clip(reason, 200), "time_source": source,
                     "user": col.get("USER", ""), "raw": raw_evidence(row)}
            if state:
                attrs["state"] = col["STATE"]
            out.append({"type": type_, "time": when, "scope": "node", "entity": node,
                        "node": node, "severity": "warning" if type_ == "node.drained" else
                        "error", "message": clip(row.strip(), 500), "attributes": attrs})
    return out


_DATE_LINE = re.compile(r"^\s*(?P<when>\w{3} \w{3} +\d{1,2} \d\d:\d\d:\d\d \d{4})\s*$")


def _snapshot_time(text: str, ctx: Context) -> tuple[str, str] | None:
    """The time `sinfo -l` prints above its table (`Thu Jun  9 22:22:36 2016`, local)."""
    from datetime import datetime

    from ingest.timestamps import local_time

    for line in text.splitlines()[:10]:
        if m := _DATE_LINE.match(line):
            try:
                stamp = datetime.strptime(" ".join(m["when"].split()), "%a %b %d %H:%M:%S %Y")
            except ValueError:
                return None
            return local_time(stamp.strftime("%Y-%m-%d %H:%M:%S"), ctx), "line"
    return None


def _nodes(text: str, row: str, ref: str, field: str = "NODELIST(REASON)") -> list[str] | Reject:
    """A row's hostlist, or the row refused naming the limit it passes."""
    try:
        return expand_hostlist(text, field=field)
    except HostlistError as exc:
        return Reject(exc.field, exc.reason, raw_evidence(row), ref)


SACCT = Adapter("sacct", parse_sacct, doc="Slurm `sacct --parsable2` text", line_oriented=True)
SQUEUE = Adapter("squeue", parse_squeue, doc="Slurm `squeue` text (default or --format with "
                 "its header)", line_oriented=True)
SINFO = Adapter("sinfo", parse_sinfo, doc="Slurm `sinfo` text and `sinfo -R`",
                line_oriented=True)

