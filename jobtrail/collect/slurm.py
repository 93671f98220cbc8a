"""`jobtrail collect slurm`: follow a live Slurm and turn it into canonical events.

Two sources, each used for what it says best (tested on Slurm 22.05.8, docs/collect.md):
- `squeue --json`, polled: every job the controller holds, with its attempt (`restart_cnt`),
  pending reason, nodes, GPUs and end state -> `job.submitted`, `job.pending` (one per reason),
  `job.started`, `job.completed` / `job.failed` / `job.cancelled` / `job.timeout` /
  `job.preempted`, through `ingest.slurm.job_records`. 22.05 prints `exit_code` as the raw wait
  status (256 = exit 1, 15 = SIGTERM): it is decoded here into the exit code and the signal.
- the slurmctld log, followed across rotation: node drain / down / resume with their reasons
  (`ingest.slurm_text.parse_slurmctld`) and `Requeuing JobId=N`, which squeue never shows (the
  job is PENDING again with `restart_cnt + 1`): each requeue ends attempt k with `job.requeued`
  (reason NODE_FAIL with the failed node when one of the job's nodes went down at that moment,
  PREEMPTED, or REQUEUED for an admin or the job itself). Without a log, `sinfo --json` gives
  the node states instead.

Ids come from the content (`slurm-<cluster>-<job>-<attempt>-<type>`, node events a hash of the
line or the node, state and `reason_changed_at`), never from the read position. The cursor (log
file inode and offset, requeues counted per job, what was already sent) is written atomically
after the sink acknowledged: a SIGKILL between the two re-sends at most one batch, with the
same ids, which the store keeps once.
"""

from __future__ import annotations

import json
import logging
import re
import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ingest import hostlist
from ingest.adapters import Adapter, Context, Reject, run
from ingest.base import raw_evidence
from ingest.canonical import Decoded
from ingest.hostlist import HostlistError, expand_indices
from ingest.slurm import expand_hostlist, job_records
from ingest.slurm_text import parse_slurmctld
from jobtrail.collect.slurm_cursor import Cursor, LogFollower, Runner, Sink, run_tool

log = logging.getLogger("jobtrail.collect.slurm")

_NODE_LINE = re.compile(r"update_node: node |Nodes? \S+ not responding|Node \S+ now responding|"
                        r"node \S+ returned to service")
_REASON_LINE = re.compile(r"update_node: node \S+ reason set to: ")
_DOWN = re.compile(r"update_node: node (?P<node>\S+) state set to (?:DOWN|FAIL)|"
                   r"Nodes? (?P<nodes>\S+) not responding, setting DOWN")
_REQUEUING = re.compile(r"Requeuing JobId=(?P<job>\d+(?:_\d+)?)")
_FAILED_NODE = re.compile(r"requeue job JobId=(?P<job>\d+(?:_\d+)?) due to failure of node "
                          r"(?P<node>\S+)")
_PREEMPT = re.compile(r"preempted JobId=(?P<job>\d+(?:_\d+)?) has been requeued")
_ALLOC = re.compile(r"(?:sched: Allocate JobId=(?P<a>\d+) NodeList=(?P<an>\S+)|"
                    r"_start_job: Started JobId=(?P<b>\d+) in \S+ on (?P<bn>\S+))")
_STAMP = re.compile(r"^\[(?P<t>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)\]")
_NODE_FAIL_WINDOW_S = 5.0
DRILL_JOB_NAME = "jobtrail-drill"
_SETTLE_S = 5.0
_KEEP_JOBS = 20_000
"""Jobs (and nodes) the cursor remembers; far more than a controller holds (MinJobAge)."""
_DRILL_REASON = re.compile(r"\bjobtrail (?P<drill>drill-\S+)")
_SIGNALS = {9: "SIGKILL", 15: "SIGTERM", 6: "SIGABRT", 11: "SIGSEGV", 7: "SIGBUS", 2: "SIGINT"}


def _epoch_of(line: str) -> float | None:
    m = _STAMP.match(line)
    if not m:
        return None
    return datetime.fromisoformat(m.group("t")).replace(tzinfo=UTC).timestamp()


def wait_status(raw: Any) -> tuple[int | None, int | None]:
    """(exit code, signal) of squeue 22.05's raw `exit_code` wait status; later releases
    print `{"return_code": N, "signal": {...}}`, read as is."""
    if isinstance(raw, dict):
        code = raw.get("return_code")
        sig = raw.get("signal", {})
        number = sig.get("signal_id") if isinstance(sig, dict) else None
        if isinstance(code, dict):
            code = code.get("number")
        return (int(code) if isinstance(code, int) else None,
                int(number) if isinstance(number, int) and number > 0 else None)
    if not isinstance(raw, int) or isinstance(raw, bool):
        return None, None
    if raw & 0x7F:
        return 128 + (raw & 0x7F), raw & 0x7F
    return raw >> 8, None


def _gres(job: dict[str, Any]) -> tuple[int | None, list[str]]:
    count = re.search(r"gres/gpu(?::[\w-]+)?=(\d+)", str(job.get("tres_alloc_str") or ""))
    ids: list[str] = []
    for detail in job.get("gres_detail") or []:
        if m := re.search(r"IDX:([\d,-]+)", str(detail)):
            ids += [str(i) for i in expand_indices(m.group(1), field="gres_detail")]
    return (int(count.group(1)) if count else None), ids


def _tag_drill(draft: dict[str, Any], cursor: Cursor) -> None:
    """Mark the events of a recovery drill (its job, or a node state it set) so its incident
    is recorded as a drill."""
    attrs = draft.setdefault("attributes", {})
    drill = cursor.drills.get(str(draft.get("job_id") or ""))
    if drill is None and (m := _DRILL_REASON.search(str(attrs.get("reason") or ""))):
        drill = m.group("drill")
    if drill:
        attrs["drill"] = drill


class SlurmCollector:
    """One `step()` reads every source once and sends what is new; `run()` repeats it."""

    def __init__(self, sink: Sink, cursor_path: Path, *, cluster: str = "",
                 project: str = "", log_path: Path | None = None,
                 producer: str = "", tool: Runner = run_tool) -> None:
        self.sink = sink
        self.cursor_path = cursor_path
        self.cursor = Cursor.load(cursor_path)
        self.cluster = cluster
        self.project = project
        self.follower = LogFollower(log_path) if log_path else None
        self.producer = producer or f"slurm-collector@{cluster or 'slurm'}"
        self.tool = tool
        self.sent_total = 0

    def _ctx(self, **extra: Any) -> Context:
        return Context(producer=self.producer, observed_at=datetime.now(UTC),
                       cluster=self.cluster or "default", origin="slurm-collector",
                       **extra)

    def _validate(self, drafts: list[dict[str, Any] | Reject], ctx: Context) -> list[Decoded]:
        return run(Adapter("slurm-collector", lambda _t, _c: drafts), "", ctx)

    # --- squeue -----------------------------------------------------------------------------
    def _jobs(self, cursor: Cursor) -> tuple[list[dict[str, Any] | Reject], set[str]]:
        payload = json.loads(self.tool(["squeue", "--json"]))
        drafts: list[dict[str, Any] | Reject] = []
        held: set[str] = set()
        for i, job in enumerate(payload.get("jobs") or []):
            if not isinstance(job, dict) or job.get("job_id") is None:
                continue
            job_id = str(job["job_id"])
            held.add(job_id)
            if not self.cluster and job.get("cluster"):
                self.cluster = str(job["cluster"])
            state = str(job.get("job_state") or "").upper()
            if state in ("COMPLETING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD",
                         "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT"):
                continue  # in between: the next poll says where it landed
            cursor.accounts[job_id] = str(job.get("account") or "")
            if str(job.get("name") or "").startswith(DRILL_JOB_NAME):
                cursor.drills[job_id] = str(job.get("comment") or "") or "drill"
            try:
                nodes = expand_hostlist(str(job.get("nodes") or ""), field=f"jobs[{i}].nodes")
                gpus, gpu_ids = _gres(job)
            except HostlistError as exc:
                drafts.append(Reject(exc.field, exc.reason, raw_evidence(job)))
                continue
            if nodes:
                cursor.job_nodes[job_id] = nodes
            code, signal = wait_status(job.get("exit_code"))
            if state == "RUNNING":
                cursor.alloc[job_id] = {"gpus": gpus, "gpu_ids": gpu_ids,
                                        "account": cursor.accounts[job_id]}
            shaped = {**job, "exit_code": {"return_code": code}}
            if gpus is not None:
                shaped["tres"] = {"allocated": [{"type": "gres", "name": "gpu", "count": gpus}]}
            for draft in job_records(shaped, i, self._ctx(project=self.project)):
                if isinstance(draft, Reject):
                    drafts.append(draft)
                    continue
                attrs = draft["attributes"]
                if draft["type"] == "job.pending":
                    draft["id"] += "-" + re.sub(r"[^\w.-]", "_", attrs["reason"])[:40]
                    if cursor.sent.get(job_id):
                        draft["time"] = int(time.time())  # a reason that changed later
                if draft["type"] == "job.started":
                    if self.follower is not None:
                        continue  # the log's allocation line says it, to the millisecond
                    attrs["gpu_ids"] = gpu_ids
                if draft["type"] == "job.cancelled" and not signal and not code and \
                        time.time() - float(job.get("end_time") or 0) < _SETTLE_S:
                    continue  # the kill's wait status lands a moment after the state
                if draft["type"] in ("job.failed", "job.cancelled", "job.timeout",
                                     "job.completed", "job.preempted") and signal:
                    attrs["signal"] = _SIGNALS.get(signal, f"signal {signal}")
                if job.get("time_limit") and isinstance(job["time_limit"], int):
                    attrs.setdefault("time_limit_min", job["time_limit"])
                drafts.append(draft)
        return drafts, held

    # --- slurmctld log ----------------------------------------------------------------------
    def _log(self, lines: list[str], cursor: Cursor) -> list[dict[str, Any] | Reject]:
        drafts: list[dict[str, Any] | Reject] = []
        node_lines: list[str] = []
        failed_node: dict[str, str] = {}
        for line in lines:
            body = line.split("] ", 1)[-1]
            at = _epoch_of(line) or time.time()
            if _NODE_LINE.search(body):
                node_lines.append(line)
                if m := _DOWN.search(body):
                    try:
                        down = [m.group("node")] if m.group("node") else \
                            expand_hostlist(m.group("nodes"))
                    except HostlistError as exc:
                        drafts.append(Reject(exc.field, exc.reason, raw_evidence(line)))
                        continue
                    for node in down:
                        cursor.down_at[node] = at
                continue
            if m := _ALLOC.search(body):
                try:
                    allocated = expand_hostlist(m.group("an") or m.group("bn"))
                except HostlistError as exc:
                    drafts.append(Reject(exc.field, exc.reason, raw_evidence(line)))
                    continue
                drafts.append(self._started(m.group("a") or m.group("b"), allocated,
                                            line, at, cursor))
            elif m := _FAILED_NODE.search(body):
                failed_node[m.group("job")] = m.group("node")
            elif m := _PREEMPT.search(body):
                failed_node[m.group("job")] = "PREEMPTED"
            elif m := _REQUEUING.search(body):
                drafts.append(self._requeue(m.group("job"), line, at, cursor,
                                            failed_node.pop(m.group("job"), "")))
        if node_lines:
            drafts += parse_slurmctld("\n".join(node_lines), self._ctx())
        return drafts

    def _requeue(self, job: str, line: str, at: float, cursor: Cursor,
                 named: str) -> dict[str, Any] | Reject:
        attempt = cursor.requeues.get(job, 0) + 1
        cursor.requeues[job] = attempt
        project = self.project or cursor.accounts.get(job) or self._account(job)
        if not project:
            return Reject("project", f"requeue of job {job}: its account is unknown "
                          "(give --project)", line)
        cursor.accounts[job] = project
        nodes = cursor.job_nodes.get(job, [])
        down = [n for n in nodes if abs(cursor.down_at.get(n, -1e18) - at)
                <= _NODE_FAIL_WINDOW_S]
        attributes: dict[str, Any] = {"raw": line[:4096], "time_source": "line"}
        if named == "PREEMPTED":
            attributes["reason"] = "PREEMPTED"
        elif named or down:
            attributes.update(reason="NODE_FAIL", failed_nodes=[named] if named else down)
        else:
            attributes["reason"] = "REQUEUED"
        cluster = self.cluster or "default"
        return {"id": f"slurm-{cluster}-{job}-{attempt}-job.requeued", "type": "job.requeued",
                "time": datetime.fromtimestamp(at, UTC).isoformat(), "project": project,
                "job_id": job, "attempt": attempt, "severity": "error" if down or named
                else "warning", "message": f"requeued ({attributes['reason']})",
                "attributes": {**attributes, "nodes": nodes}}

    def _started(self, job: str, nodes: list[str], line: str, at: float,
                 cursor: Cursor) -> dict[str, Any] | Reject:
        """An allocation line starts attempt `requeues + 1` (the log is the one source that
        holds every attempt's start, even one that began and was requeued between polls)."""
        cursor.job_nodes[job] = nodes
        attempt = cursor.requeues.get(job, 0) + 1
        known = cursor.alloc.get(job) or self._details(job)
        project = self.project or cursor.accounts.get(job) or str(known.get("account") or "")
        if not project:
            return Reject("project", f"start of job {job}: its account is unknown "
                          "(give --project)", line)
        cursor.accounts[job] = project
        cluster = self.cluster or "default"
        attributes = {"nodes": nodes, "gpus": known.get("gpus"),
                      "gpu_ids": known.get("gpu_ids") or [], "raw": line[:4096],
                      "time_source": "line"}
        return {"id": f"slurm-{cluster}-{job}-{attempt}-job.started", "type": "job.started",
                "time": datetime.fromtimestamp(at, UTC).isoformat(), "project": project,
                "job_id": job, "attempt": attempt, "severity": "info",
                "message": f"running on {len(nodes)} nodes", "attributes": attributes}

    def _details(self, job: str) -> dict[str, Any]:
        """Account and GPUs of a job the controller still holds (`scontrol show job -d`)."""
        try:
            text = self.tool(["scontrol", "show", "job", "-d", job])
        except (RuntimeError, OSError, subprocess.TimeoutExpired):
            return {}
        account = re.search(r"\bAccount=(\S+)", text)
        gpus = re.search(r"\bTRES=\S*gres/gpu(?::[\w-]+)?=(\d+)", text)
        ids = [f"gpu:{g}" for g in re.findall(r"GRES=\S*?\(IDX:([\d,-]+)\)", text)]
        return {"account": account.group(1) if account and account.group(1) != "(null)"
                else "", "gpus": int(gpus.group(1)) if gpus else None,
                "gpu_ids": _gres({"gres_detail": ids})[1]}

    def _account(self, job: str) -> str:
        return str(self._details(job).get("account") or "")

    # --- sinfo (when no log is followed) ------------------------------------------------
    def _nodes(self, cursor: Cursor) -> list[dict[str, Any] | Reject]:
        payload = json.loads(self.tool(["sinfo", "--json"]))
        drafts: list[dict[str, Any] | Reject] = []
        cluster = self.cluster or "default"
        for node in payload.get("nodes") or []:
            name = str(node.get("name") or "")
            state = str(node.get("state") or "").lower()
            flags = [str(f).upper() for f in node.get("state_flags") or []]
            reason = str(node.get("reason") or "")
            changed = int(node.get("reason_changed_at") or 0)
            if state == "down" or "NOT_RESPONDING" in flags:
                kind, severity = "node.not_ready", "error"
            elif "DRAIN" in flags or state in ("drained", "draining"):
                kind, severity = "node.drained", "warning"
            else:
                kind, severity = "node.ready", "info"
            key = f"{kind}-{changed}"
            previous = cursor.nodes.get(name)
            cursor.nodes[name] = key
            if key == previous or (kind == "node.ready" and previous is None):
                continue
            at = changed if kind != "node.ready" else int(time.time())
            drafts.append({"id": f"slurm-{cluster}-node-{name}-{key}", "type": kind,
                           "time": at, "scope": "node", "entity": name, "node": name,
                           "severity": severity, "message": f"{name} {state} {reason}".strip(),
                           "attributes": {"reason": reason or state,
                                          "set_by": node.get("reason_set_by_user") or "",
                                          "state_flags": flags}})
        return drafts

    # --- the loop -------------------------------------------------------------------------
    def _gather(self, cursor: Cursor) -> tuple[list[dict[str, Any] | Reject], set[str]]:
        """What every source says now: the jobs, then the log's new lines (or the nodes)."""
        drafts, held = self._jobs(cursor)
        if self.follower is not None:
            lines, moved = self.follower.read(cursor)
            if lines and _REASON_LINE.search(lines[-1]):
                # its `state set to` line follows within the same millisecond: read them
                # together next time, so the state keeps its reason
                moved.log_offset -= len(lines.pop().encode("utf-8", "replace")) + 1
            cursor.log_inode, cursor.log_offset = moved.log_inode, moved.log_offset
            drafts += self._log(lines, cursor)
        else:
            drafts += self._nodes(cursor)
        return drafts, held

    def step(self) -> int:
        """Read every source once, send what is new, then move the cursor. Returns the number
        of records sent."""
        cursor = Cursor(**json.loads(json.dumps(self.cursor.__dict__)))
        if not self.cluster:
            m = re.search(r"^ClusterName\s*=\s*(\S+)", self.tool(["scontrol", "show", "config"]),
                          re.M)
            self.cluster = m.group(1) if m else "default"
        with hostlist.budget():  # one poll's hostlists share one limit
            drafts, held = self._gather(cursor)
        for draft in drafts:
            if isinstance(draft, dict):
                _tag_drill(draft, cursor)
        decoded = self._validate(drafts, self._ctx())
        fresh: list[Decoded] = []
        for record in decoded:
            rid = getattr(record, "id", None)
            job = getattr(record, "job_id", None) or "-"
            if rid is not None and rid in cursor.sent.get(job, []):
                continue
            fresh.append(record)
            if rid is not None:
                cursor.sent.setdefault(job, []).append(rid)
        for job in [j for j in cursor.sent if j != "-" and j not in held
                    and j not in cursor.requeues]:
            del cursor.sent[job]  # the controller forgot it: it cannot come back
            cursor.drills.pop(job, None)
            cursor.alloc.pop(job, None)
        if len(cursor.sent.get("-", [])) > 5000:
            cursor.sent["-"] = cursor.sent["-"][-2000:]
        for table in (cursor.requeues, cursor.job_nodes, cursor.accounts, cursor.alloc,
                      cursor.drills, cursor.down_at):
            for key in list(table)[:max(0, len(table) - _KEEP_JOBS)]:
                del table[key]  # oldest first: a job the log still names after this is gone
        if fresh:
            self.sink.submit(fresh)
        cursor.save(self.cursor_path)
        self.cursor = cursor
        self.sent_total += len(fresh)
        return len(fresh)

    def run(self, *, interval_s: float = 1.0, until: Callable[[], bool] = lambda: False,
            max_steps: int | None = None) -> None:
        steps = 0
        while not until() and (max_steps is None or steps < max_steps):
            started = time.monotonic()
            try:
                self.step()
            except (RuntimeError, OSError, subprocess.TimeoutExpired, ValueError) as exc:
                log.warning("slurm collector: %s (retrying)", exc)
            steps += 1
            time.sleep(max(0.0, interval_s - (time.monotonic() - started)))
