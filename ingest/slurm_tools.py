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
- sinfo: read in `ingest/slurm_sinfo.py`.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from ingest import slurm_paste
from ingest.base import Adapter, Context, Reject, raw_evidence
from ingest.canonical import ParseError
from ingest.redact import clip
from ingest.slurm_sinfo import _nodes, parse_sinfo

_SACCT_FIELDS = {"JobID": "JobId", "JobName": "JobName", "Partition": "Partition",
                 "Account": "Account", "User": "UserId", "NodeList": "NodeList",
                 "NNodes": "NumNodes", "Submit": "SubmitTime", "Start": "StartTime",
                 "End": "EndTime", "ExitCode": "ExitCode", "AllocTRES": "AllocTRES",
                 "ReqTRES": "ReqTRES", "Cluster": "ClusterName", "Reason": "Reason",
                 "SubmitLine": "SubmitLine", "NTasks": "NumTasks"}


_SACCT_NAMES = {name.lower(): name for name in (*_SACCT_FIELDS, "State", "DerivedExitCode")}
_SACCT_NAMES["jobidraw"] = "JobIDRaw"
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
        job = row_fields.get("JobID") or row_fields.get("JobIDRaw") or (
            only if only.isdigit() else "")
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
    return _once(out)


def _once(records: list[dict[str, Any] | Reject]) -> list[dict[str, Any] | Reject]:
    """The same table pasted twice (a tool polled in a loop, its output logged each time)
    is one event per id."""
    seen: set[str] = set()
    out: list[dict[str, Any] | Reject] = []
    for record in records:
        key = str(record.get("id") or "") if isinstance(record, dict) else ""
        if key and key in seen:
            continue
        seen.add(key)
        out.append(record)
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
            reason, cut = _reason(where)
            if cut:
                attributes["reason_truncated"] = True
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
            attributes.update(_squeue_gpus(col, nodes))
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
    return _once(out)


def _reason(cell: str) -> tuple[str, bool]:
    """squeue's `(Reason)`, and whether the column's width cut it: `(Resources,` is
    `Resources`; `(ReqNodeNotAvail, UnavailableNodes:node[01-0` keeps the words it shows
    whole, `ReqNodeNotAvail, UnavailableNodes`, not a half hostlist."""
    text = cell.strip()
    if not text.startswith("(") or text.endswith(")"):
        return text.strip("()") or "None", False
    items = [item.strip() for item in text[1:].split(",")]
    if items and items[-1].count("[") > items[-1].count("]"):
        items[-1] = items[-1].rsplit(":", 1)[0] if ":" in items[-1] else ""
    return ", ".join(item for item in items if item) or "None", True


_SQUEUE_GPUS = {"TRES_ALLOC": "tres_alloc_str", "TRES_PER_JOB": "tres_per_job",
                "TRES_PER_NODE": "tres_per_node", "TRES_PER_TASK": "tres_per_task",
                "GRES": "gres", "TASKS": "tasks", "NODES": "node_count"}
"""squeue's columns that say a job's GPUs (`%b`/`-O tres-per-node`, `-O tres-alloc`, ...), by
the field of squeue --json they print."""


def _squeue_gpus(col: dict[str, str], nodes: list[str]) -> dict[str, Any]:
    """The GPUs a running squeue row says (`gpus`, `gpus_source`), read as squeue --json's."""
    from ingest.slurm_gpus import gpus_from_job

    job: dict[str, Any] = {field: col[name] for name, field in _SQUEUE_GPUS.items()
                           if col.get(name) not in (None, "", "N/A", "(null)")}
    if nodes and "node_count" not in job:
        job["node_count"] = len(nodes)
    found = gpus_from_job(job)
    return {"gpus": found[0], "gpus_source": found[1]} if found else {}


SACCT = Adapter("sacct", parse_sacct, doc="Slurm `sacct --parsable2` text", line_oriented=True)
SQUEUE = Adapter("squeue", parse_squeue, doc="Slurm `squeue` text (default or --format with "
                 "its header)", line_oriented=True)
SINFO = Adapter("sinfo", parse_sinfo, doc="Slurm `sinfo` text and `sinfo -R`",
                line_oriented=True)

