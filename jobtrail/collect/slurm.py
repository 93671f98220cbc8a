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
An array task is the job `<array>_<task>` in both sources (squeue's `array_job_id` and
`array_task_id`; the log's `JobId=1_0(3)`), as users and sacct name it.

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
from ingest.hostlist import HostlistError
from ingest.slurm import expand_hostlist, job_records
from ingest.slurm_text import parse_slurmctld
from jobtrail.collect.slurm_cursor import Cursor, LogFollower, Runner, Sink, run_tool
from jobtrail.collect.slurm_lines import (
    _ALLOC,
    _DOWN,
    _FAILED_NODE,
    _KEEP_JOBS,
    _NODE_FAIL_WINDOW_S,
    _NODE_LINE,
    _PREEMPT,
    _REASON_LINE,
    _REQUEUING,
    _SETTLE_S,
    _SIGNALS,
    DRILL_JOB_NAME,
    _epoch_of,
    _gres,
    _tag_drill,
    job_name,
    wait_status,
)

log = logging.getLogger("jobtrail.collect.slurm")

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
            job_id = job_name(job)
            if job_id is None:
                continue  # an array's tasks still pending as one record: each task, once
                # split off to start, is a record (and a job) of its own
            if job_id != str(job["job_id"]):
                job = {**job, "job_id": job_id}
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
            if state == "RUNNING":  # a record read the instant the job started may not
                # name its GPU ids yet: what an earlier poll named is kept
                gpu_ids = gpu_ids or (cursor.alloc.get(job_id) or {}).get("gpu_ids") or []
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
        known = cursor.alloc.get(job) or {}
        if known.get("gpus") is None or not known.get("gpu_ids"):
            # squeue saw no allocation, or not its GPU ids yet (read the instant the job
            # started, on a loaded controller): ask the controller for this job
            details = self._details(job, at)
            known = {**details, **{k: v for k, v in known.items() if v}}
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

    def _details(self, job: str, at: float | None = None) -> dict[str, Any]:
        """Account and GPUs of a job: the controller's (`scontrol show job -d`) while it
        holds the job, else, or when that names no GPUs, the accounting record of the
        attempt that started at `at` (`sacct --json`: every attempt, requeued ones too, with
        its AllocTRES)."""
        found: dict[str, Any] = {}
        try:
            text = self.tool(["scontrol", "show", "job", "-d", job])
        except (RuntimeError, OSError, subprocess.TimeoutExpired):
            text = ""
        if text:
            account = re.search(r"\bAccount=(\S+)", text)
            gpus = re.search(r"\bTRES=\S*gres/gpu(?::[\w-]+)?=(\d+)", text)
            ids = re.findall(r"GRES=\S*?\((IDX:[\d,-]+)\)", text)
            found = {"account": account.group(1) if account and account.group(1) != "(null)"
                     else "", "gpus": int(gpus.group(1)) if gpus else None,
                     "gpu_ids": _gres({"gres_detail": ids})[1]}
        if found.get("gpus") is None or not found.get("account"):
            accounted = self._accounted(job, at)
            found = {"gpu_ids": [], **found,
                     **{k: v for k, v in accounted.items() if v and not found.get(k)}}
        return found

    def _accounted(self, job: str, at: float | None) -> dict[str, Any]:
        """The account and allocated GPUs sacct recorded for the attempt of `job` that
        started at `at` (within 2 s), else its newest attempt."""
        try:
            records = json.loads(self.tool(["sacct", "--json", "-j", job])).get("jobs") or []
        except (RuntimeError, OSError, subprocess.TimeoutExpired, ValueError):
            return {}
        if not isinstance(records, list):
            return {}
        records = [r for r in records if isinstance(r, dict)]
        if at is not None:
            near = [r for r in records if isinstance((r.get("time") or {}).get("start"), int)
                    and abs(r["time"]["start"] - at) <= 2]
            records = near or records
        if not records:
            return {}
        record = max(records, key=lambda r: (r.get("time") or {}).get("start") or 0)
        allocated = (record.get("tres") or {}).get("allocated") or []
        counts = [t.get("count") for t in allocated if isinstance(t, dict)
                  and t.get("type") == "gres" and str(t.get("name") or "").split(":")[0]
                  == "gpu" and isinstance(t.get("count"), int)]
        return {"account": str(record.get("account") or ""),
                "gpus": sum(counts) if counts else None}

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
