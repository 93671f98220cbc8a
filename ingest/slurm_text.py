"""Slurm's text outputs: `scontrol show job` and slurmctld log lines.

`scontrol show job` (adapter `scontrol`): records of `Key=Value` tokens over indented lines,
one record per `JobId=` (blank lines between records are optional; `scontrol -o` one-liners
work too). Each record is rewritten into the sacct shape and read by the same code as
`sacct --json` (`ingest/slurm.py`), so both give the same events and the same ids. Times
have no zone (Slurm prints slurmctld's local time): they are read as UTC; run slurmctld in
UTC or convert on the shipper (documented in docs/adapters.md).

slurmctld log (adapter `slurmctld`), `[2026-11-30T08:57:40.123] ...` lines (zone-less: UTC):
- `error: Nodes node-[041-042] not responding` (`, setting DOWN`) -> `node.not_ready` per node;
- `update_node: node node-041 state set to DRAINING|DRAINED|DOWN` -> `node.drained` /
  `node.not_ready`, with the reason of the preceding `update_node: node node-041 reason set
  to: ...` line;
- `Node node-041 now responding` / `node node-041 returned to service` -> `node.ready`;
- `Requeuing JobId=1234 due to failure of node node-041` (also `requeue job JobId=1234 ...`,
  `requeue JobId=1234 ...`) -> `job.requeued` with `reason = NODE_FAIL` and the failed node
  (the attempt is the shipper's, else the attempt running at that time);
- `_job_complete: requeue JobId=1234 per user/system request` -> `job.requeued`: the next
  `sched: Allocate JobId=1234 NodeList=...` is the new attempt, on the new node list;
- a drain reason naming an Xid (NHC's `Xid 79`) puts `xid` on the `node.drained`, which
  links the drain to that Xid;
- `job_complete: JobId=1234 ... WTERMSIG 9|WEXITSTATUS N` lines and the rest are not events
  and are skipped. A line that names a node failure we cannot read is dead-lettered.
Ids are natural (a hash of the line's content), so a line shipped twice is one event.
"""

from __future__ import annotations

import re
from datetime import UTC
from typing import Any

from ingest import scontrol_node
from ingest.base import Adapter, Context, Reject, raw_evidence
from ingest.canonical import ParseError
from ingest.hostlist import HostlistError
from ingest.redact import clip
from ingest.slurm import expand_hostlist, job_records
from ingest.timestamps import read
from schemas.events import parse_time

_TOKEN = re.compile(r"(?:^|\s)(?P<k>[\w/:]+)=(?P<v>\S*)")
_UNSET = {"", "(null)", "N/A", "Unknown", "None"}


def _epoch(value: str) -> int | None:
    if value in _UNSET:
        return None
    try:
        when = parse_time(value)
    except ValueError:
        return None
    return int(when.astimezone(UTC).timestamp())


def _records(text: str) -> list[tuple[int, str]]:
    """(first line number, text) of each `JobId=` record."""
    out: list[tuple[int, list[str]]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.lstrip().startswith("JobId="):
            out.append((number, [line]))
        elif line.strip() and out:
            out[-1][1].append(line)
    return [(number, "\n".join(lines)) for number, lines in out]


def sacct_shape(fields: dict[str, str]) -> dict[str, Any]:
    """A `scontrol show job` record as the dict `ingest.slurm` reads from sacct --json."""
    gpus = re.search(r"gres/gpu(?::[\w-]+)?=(\d+)", fields.get("TRES", "")
                     or fields.get("ReqTRES", ""))
    code, _, _signal = fields.get("ExitCode", "").partition(":")
    job: dict[str, Any] = {
        "job_id": fields["JobId"], "name": fields.get("JobName", ""),
        "state": fields.get("JobState", ""), "state_reason": fields.get("Reason", ""),
        "account": fields.get("Account", ""), "partition": fields.get("Partition", ""),
        "user": fields.get("UserId", "").split("(")[0],
        "restart_cnt": int(fields["Restarts"]) if fields.get("Restarts", "").isdigit() else 0,
        "nodes": "" if fields.get("NodeList", "") in _UNSET else fields["NodeList"],
        "node_count": int(fields["NumNodes"]) if fields.get("NumNodes", "").isdigit() else None,
        "time": {"submission": _epoch(fields.get("SubmitTime", "")),
                 "start": _epoch(fields.get("StartTime", "")),
                 "end": _epoch(fields.get("EndTime", ""))},
        "exit_code": {"return_code": int(code) if code.isdigit() else None},
    }
    if fields.get("ClusterName"):
        job["cluster"] = fields["ClusterName"]
    if gpus:
        job["tres"] = {"allocated": [{"type": "gres", "name": "gpu",
                                      "count": int(gpus.group(1))}]}
    return job


def parse_scontrol(text: str, ctx: Context) -> list[dict[str, Any] | Reject]:
    text = text.replace("**", "")  # a paste's Markdown bold; scontrol never prints `**`
    records = _records(text)
    if not records and ctx.job_id and re.search(r"(?m)^\s*JobState=|\sJobState=", text) \
            and not scontrol_node.records(text):
        # the record pasted without its first line: the job is the one the shipper names
        records = [(1, f"JobId={ctx.job_id}\n{text}")]
    if not records and not scontrol_node.records(text):
        raise ParseError("JobId", "no `JobId=` or `NodeName=` record (expected `scontrol "
                         "show job` or `scontrol show node` output)")
    out: list[dict[str, Any] | Reject] = scontrol_node.parse(text, ctx)
    for i, (number, record) in enumerate(records):
        fields = {m.group("k"): m.group("v") for m in _TOKEN.finditer(record)}
        ref = f"{ctx.origin}:{number}"
        if not fields.get("JobState"):
            out.append(Reject("JobState", "missing", raw_evidence(record), ref))
            continue
        out.extend(text_job_records(fields, i, ctx, record))
    return out


def text_job_records(fields: dict[str, str], i: int, ctx: Context,
                     raw: str) -> list[dict[str, Any] | Reject]:
    """A job read from a Slurm text tool (scontrol, sacct -P), as sacct --json's events,
    with the tool's own text as evidence."""
    drafts = job_records(sacct_shape(fields), i, ctx)
    for draft in drafts:
        if isinstance(draft, dict):
            draft["attributes"]["raw"] = raw_evidence(raw)
    return drafts


_TAG = re.compile(r"^slurmctld(?:\[\d+\])?: ")
_NOT_RESPONDING = re.compile(r"Nodes? (?P<nodes>\S+) not responding")
_STATE = re.compile(r"update_node: node (?P<node>\S+) state set to (?P<state>[A-Z_]+)")
_REASON = re.compile(r"update_node: node (?P<node>\S+) reason set to: (?P<reason>.+)")
_BACK = re.compile(r"(?:Node (?P<a>\S+) now responding|node (?P<b>\S+) returned to service)")
_REQUEUE = re.compile(r"(?:Requeuing|requeue(?: job)?) JobId=(?P<job>\d+(?:_\d+)?) due to "
                      r"failure of node (?P<node>\S+)")


_JOB = r"JobId=(?P<job>\d+(?:_\d+)?)"
_RPC_ALLOCATE = re.compile(r"_slurm_rpc_allocate_resources " + _JOB + r" NodeList=(?P<nodes>\S+)")
_BARE_REQUEUE = re.compile(r"^Requeuing " + _JOB + r"$")
_PROLOG_LAUNCH = re.compile(r"Prolog launch failure, " + _JOB)
_PERILOG_DRAIN = re.compile(r"(?:(?P<prolog>Prolog or job env setup failure)|(?P<epilog>"
                            r"epilog error)) on (?:node )?(?P<node>[\w.-]+), draining the node")
# validate_node_specs: why a registering node is drained, said before `drain_nodes` says it was
_SPEC_REASON = re.compile(r"(?:error|debug\d?):\s+Node (?P<node>\S+) (?P<reason>has (?:low|high) "
                          r"[\w*]{1,40} (?:size|count) \(\d{1,20} [<>] \d{1,20}\))")
_DRAIN_NODES = re.compile(r"^drain_nodes: node (?P<node>\S+) state set to DRAIN$")
_INACTIVE = re.compile(r"inactivity time limit reached for " + _JOB)
_JOB_DONE = re.compile(r"^_job_complete: " + _JOB + r" done$")
_SUBMIT = re.compile(r"_slurm_rpc_submit_batch_job: " + _JOB + r"(?: InitPrio=(?P<prio>\d+))?")
_ALLOCATE = re.compile(r"sched: Allocate " + _JOB + r" NodeList=(?P<nodes>\S+)"
                       r"(?:.*?Partition=(?P<part>\S+))?")
_STARTED = re.compile(r"_start_job: Started " + _JOB + r" in (?P<part>\S+) on (?P<nodes>\S+)")
_ENDED = re.compile(r"_job_complete: " + _JOB + r" (?P<how>WEXITSTATUS|WTERMSIG) (?P<code>\d+)")
_KILL = re.compile(r"(?:_slurm_rpc_kill_job: REQUEST_KILL_JOB " + _JOB + r" uid (?P<uid>\d+)|"
                   r"sched: Cancel of " + _JOB.replace("job>", "job2>") + r" by UID=(?P<uid2>\d+))")
_ON_FAILED = re.compile(r"Killing " + _JOB + r" on failed node (?P<node>\S+)")
_TIME_LIMIT = re.compile(r"Time limit exhausted for " + _JOB)
_REQUEUED = re.compile(r"_job_complete: requeue " + _JOB + r" per (?P<why>[\w/ -]{1,80})")
_XID = re.compile(r"\bXid\b\D{0,3}(?P<xid>\d{1,4})", re.I)
_PREEMPTED = re.compile(r"preempted " + _JOB + r" has been requeued")
_SIGNALS = {9: "SIGKILL", 15: "SIGTERM", 6: "SIGABRT", 11: "SIGSEGV", 7: "SIGBUS", 2: "SIGINT"}


def _job_line(body: str) -> tuple[str, str, dict[str, Any], str] | Reject | None:
    """(type, job id, attributes, severity) of a slurmctld job line, a Reject (a hostlist
    past its limits), or None."""
    try:
        return _job_fields(body)
    except HostlistError as exc:
        return Reject(exc.field, exc.reason, raw_evidence(body))


def _job_fields(body: str) -> tuple[str, str, dict[str, Any], str] | None:
    if m := _SUBMIT.search(body):
        prio = m.group("prio")
        return "job.submitted", m.group("job"), {"priority": int(prio) if prio else None}, \
            "info"
    if m := _RPC_ALLOCATE.search(body):
        nodes = m.group("nodes")
        if nodes in ("(null)", ""):  # salloc waiting: the allocation was only requested
            return "job.submitted", m.group("job"), {"interactive": True}, "info"
        return "job.started", m.group("job"), {"nodes": expand_hostlist(nodes),
                                               "interactive": True}, "info"
    if m := _ALLOCATE.search(body) or _STARTED.search(body):
        return "job.started", m.group("job"), {"nodes": expand_hostlist(m.group("nodes")),
                                               "partition": m.group("part")}, "info"
    if m := _REQUEUED.search(body):
        return "job.requeued", m.group("job"), {"reason": "REQUEUED",
                                                "detail": m.group("why").strip()}, "warning"
    if m := _ENDED.search(body):
        code = int(m.group("code"))
        if m.group("how") == "WEXITSTATUS":
            return ("job.completed" if code == 0 else "job.failed", m.group("job"),
                    {"exit_code": code}, "info" if code == 0 else "error")
        name = _SIGNALS.get(code, f"signal {code}")
        return "job.failed", m.group("job"), {"exit_code": 128 + code,
                                              "reason": f"WTERMSIG {code} ({name})"}, "error"
    if m := _KILL.search(body):
        uid = m.group("uid") or m.group("uid2")
        return "job.cancelled", m.group("job") or m.group("job2"), {
            "reason": f"cancelled by uid {uid}"}, "warning"
    if m := _ON_FAILED.search(body):
        return "job.failed", m.group("job"), {"reason": "NODE_FAIL",
                                              "failed_nodes": [m.group("node")]}, "error"
    if m := _TIME_LIMIT.search(body):
        return "job.timeout", m.group("job"), {"reason": "TIMEOUT"}, "error"
    if m := _INACTIVE.search(body):
        return "job.timeout", m.group("job"), {"reason": "inactivity (InactiveLimit)"}, "error"
    if m := _PROLOG_LAUNCH.search(body):
        return "job.requeued", m.group("job"), {"reason": "prolog failure"}, "error"
    if m := _BARE_REQUEUE.match(body):
        return "job.requeued", m.group("job"), {"reason": "requeued"}, "warning"
    if m := _PREEMPTED.search(body):
        return "job.preempted", m.group("job"), {"reason": "PREEMPTED"}, "warning"
    return None


def parse_slurmctld(text: str, ctx: Context) -> list[dict[str, Any] | Reject]:
    out: list[dict[str, Any] | Reject] = []
    reasons: dict[str, str] = {}
    ended: set[str] = set()  # jobs whose attempt already ended in this log (requeue, kill)
    done: set[str] = set()  # jobs that completed: a kill after that is clean-up, not a cancel
    requeued: dict[str, str] = {}  # job -> time of the requeue already recorded
    last: dict[str, str] = {}  # node -> the last node event type recorded
    for number, line in enumerate(text.splitlines(), start=1):
        stamp = read(line, ctx)
        time, source = stamp.time, stamp.source
        ref = f"{ctx.origin}:{number}"
        base: dict[str, Any] = {"time": time,
                                "attributes": {"time_source": source, "raw": raw_evidence(line)}}
        # the line after its prefix (slurmctld's own `[time] `, or syslog's and journald's
        # `time host slurmctld[pid]: `): not the text after the first `] `, which a
        # hostlist (`node-[07-08] not responding`) has too
        body = _TAG.sub("", stamp.rest, count=1).strip()

        def node_event(type_: str, node: str, reason: str, severity: str,
                       b: dict[str, Any] = base, msg: str = body) -> dict[str, Any]:
            attributes = {**b["attributes"], "reason": clip(reason, 200)}
            if xid := _XID.search(reason):  # an NHC drain naming the Xid it saw
                attributes["xid"] = int(xid.group("xid"))
            return {**b, "type": type_, "scope": "node", "entity": node, "node": node,
                    "severity": severity, "message": clip(msg, 500), "attributes": attributes}

        def node_state(type_: str, node: str, reason: str, severity: str) -> None:
            """A node's state change; `now responding` then `returned to service` (or a
            drain then `drain_nodes`) is one change, recorded once."""
            if type_ in ("node.ready", "node.drained") and last.get(node) == type_:
                return
            last[node] = type_
            out.append(node_event(type_, node, reason, severity))

        if reason_match := _REASON.search(body) or _SPEC_REASON.search(body):
            reasons[reason_match.group("node")] = reason_match.group("reason").strip()
        elif match := _NOT_RESPONDING.search(body):
            try:
                nodes = expand_hostlist(match.group("nodes"))
            except HostlistError as exc:
                out.append(Reject(exc.field, exc.reason, raw_evidence(line), ref))
                continue
            for node in nodes:
                node_state("node.not_ready", node, "not responding", "error")
        elif match := _STATE.search(body):
            node, state = match.group("node"), match.group("state")
            why = reasons.pop(node, state.lower())
            if state.startswith("DRAIN"):
                last[node] = ""  # an operator's drain is recorded even when one was
                node_state("node.drained", node, why, "warning")
            elif state in ("DOWN", "FAIL", "FAILING"):
                node_state("node.not_ready", node, why, "error")
            elif state in ("IDLE", "RESUME", "ALLOCATED", "MIXED", "COMPLETING"):
                # back in service; ALLOCATED/MIXED when jobs were waiting for it
                node_state("node.ready", node, why, "info")
            else:
                out.append(Reject("state", f"slurmctld node state {state!r} is not mapped",
                                  raw_evidence(line), ref))
        elif match := _PERILOG_DRAIN.search(body):
            why = "Prolog error" if match.group("prolog") else "Epilog error"
            reasons[match.group("node")] = why
            last[match.group("node")] = ""
            node_state("node.drained", match.group("node"), why, "warning")
        elif match := _DRAIN_NODES.match(body):
            node = match.group("node")
            node_state("node.drained", node, reasons.pop(node, "drain"), "warning")
        elif match := _BACK.search(body):
            node_state("node.ready", match.group("a") or match.group("b"), "responding",
                       "info")
        elif match := _JOB_DONE.match(body):
            done.add(match.group("job"))
        elif match := _REQUEUE.search(body):
            if not ctx.project:
                out.append(Reject("project", "a requeue line names no project: ship slurmctld "
                                  "logs with the cluster's project (X-Jobtrail-Project)",
                                  raw_evidence(line), ref))
                continue
            job, node = match.group("job"), match.group("node")
            ended.add(job)
            requeued[job] = time
            draft: dict[str, Any] = {
                **base, "type": "job.requeued", "project": ctx.project, "job_id": job,
                "severity": "error", "message": clip(body, 500),
                "attributes": {**base["attributes"], "reason": "NODE_FAIL",
                               "failed_nodes": [node]}}
            if ctx.attempt is not None:
                draft["attempt"] = ctx.attempt
            out.append(draft)
        elif found := _job_line(body):
            if isinstance(found, Reject):
                out.append(Reject(found.field, found.reason, found.payload, ref))
                continue
            type_, job, attributes, severity = found
            if type_ in ("job.failed", "job.completed") and job in ended:
                continue  # the exit of an attempt already ended (requeued on node failure)
            if type_ == "job.cancelled" and job in done:
                continue  # slurmctld's clean-up kill of a job that had completed
            if type_ == "job.requeued" and requeued.get(job) == time:
                continue  # `Requeuing JobId=N` after the line that said why
            if type_ == "job.requeued":
                requeued[job] = time
                done.discard(job)
            if type_ in ("job.completed", "job.failed"):
                done.add(job)
            if type_ == "job.started":
                done.discard(job)
                ended.discard(job)  # a new attempt (after a requeue): its exit is its own
            if not ctx.project:
                out.append(Reject("project", f"a {type_} line names no project: ship "
                                  "slurmctld logs with the cluster's project "
                                  "(X-Jobtrail-Project)", raw_evidence(line), ref))
                continue
            if type_ in ("job.failed", "job.cancelled", "job.timeout", "job.preempted",
                         "job.requeued"):
                ended.add(job)
            job_draft: dict[str, Any] = {
                **base, "type": type_, "project": ctx.project, "job_id": job,
                "severity": severity, "message": clip(body, 500),
                "attributes": {**base["attributes"],
                               **{k: v for k, v in attributes.items() if v is not None}}}
            if ctx.attempt is not None:
                job_draft["attempt"] = ctx.attempt
            out.append(job_draft)
        elif "not responding" in body and "Node" in body:
            out.append(Reject("line", "names unresponsive nodes in an unknown wording",
                              raw_evidence(line), ref))
    return out


SCONTROL = Adapter("scontrol", parse_scontrol, doc="Slurm `scontrol show job` and `scontrol "
                   "show node` text")
SLURMCTLD = Adapter("slurmctld", parse_slurmctld, doc="slurmctld log lines (node down/drain/"
                    "resume; job submit, allocate, complete, signal, cancel, node failure, "
                    "time limit, preemption, requeue)", line_oriented=True)
