"""What Slurm itself writes into a job's output (`slurm-<id>.out`) and into slurmd's log.

Read by the training-log adapter (a job's output holds these lines beside the framework's)
and, for `*** JOB|STEP ... ***` lines, by the slurmctld adapter (slurmd's log has them too).
The wording is Slurm's own (src/slurmd/slurmstepd, src/srun); public copies of each are in
tests/ingest/fixtures/public/slurm-output/.

- `slurmstepd: error: *** JOB 494583 ON node-7 CANCELLED AT 2024-04-20T09:09:37 DUE TO TIME
  LIMIT ***` (and `*** STEP 494583.0 ...`; the legacy `*** JOB 1479012 CANCELLED AT <t> ***
  on sh-2-3`): the attempt ended, at the stated time (slurmd's local time). `DUE TO TIME
  LIMIT` -> `job.timeout`, `PREEMPTION` -> `job.preempted`, `NODE FAILURE` -> `job.failed`
  (NODE_FAIL), `JOB REQUEUE` -> `job.requeued`; a JOB cancelled for no stated reason ->
  `job.cancelled`. A STEP cancelled for no stated reason is srun ending the step after one
  of its tasks failed: a consequence, not an event of its own. The JOB and STEP lines of
  one ending are one event.
- `srun: error: node-7: task 3: Exited with exit code 1` (`tasks 0-3,7: Killed`, `Bus
  error`, `Segmentation fault`, `Aborted`) -> `job.worker_exited` on that node, the first
  task as the rank; `... : Out Of Memory` -> `job.oom` (host). `Terminated` is what every
  task of a cancelled step gets (SIGTERM): never a cause, skipped.
- `slurmstepd: error: Detected 2 oom_kill events in StepId=123.0` (and the older `Detected 1
  oom-kill event(s) in step 123.0 cgroup`) -> `job.oom` (host); the `Out Of Memory` task
  line that follows names its node and rank on the same event.
- `srun: error: Node failure on node-7` -> `job.failed` (NODE_FAIL, that node);
  `salloc: Prolog failure on node k003-006` -> `job.failed` (the prolog, that node).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ingest.base import raw_evidence

_ENDED = re.compile(r"\*\*\* (?P<what>JOB|STEP) (?P<job>\d+)(?:[._](?P<step>\w+))?"
                    r"(?: ON (?P<node>\S+))? CANCELLED AT (?P<at>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)"
                    r"(?: DUE TO (?P<why>[^*]{1,120}?))? \*\*\*(?: on (?P<legacy>\S+))?")
_TASKS = re.compile(r"^\s*srun: error: (?P<node>[\w.-]+): tasks? (?P<tasks>[\d,-]{1,200}): "
                    r"(?P<what>.{1,200})$")
_EXIT = re.compile(r"Exited with exit code (?P<code>\d+)")
_OOM_EVENTS = re.compile(r"Detected (?P<n>\d+) oom[-_]kill events?(?:\(s\))? in "
                         r"(?:StepId=|step )(?P<step>[\w.]+)")
_NODE_FAILURE = re.compile(r"^\s*srun: error: Node failure on (?P<node>[\w.-]+)")
_PROLOG = re.compile(r"^\s*s(?:alloc|run|batch): (?:error: )?Prolog failure on node "
                     r"(?P<node>[\w.-]+)")
_SIGNALS = {"Killed": "SIGKILL", "Bus error": "SIGBUS", "Segmentation fault": "SIGSEGV",
            "Aborted": "SIGABRT"}
_WHY = {"TIME LIMIT": ("job.timeout", "TIMEOUT"), "PREEMPTION": ("job.preempted", "PREEMPTED"),
        "NODE FAILURE": ("job.failed", "NODE_FAIL"), "JOB REQUEUE": ("job.requeued", "REQUEUED")}


@dataclass
class Finding:
    """One event a Slurm line says: its type, attributes, severity, and where and when (the
    time the line states, slurmd's local time, or "" when it states none)."""

    type: str
    attributes: dict[str, Any] = field(default_factory=dict)
    severity: str = "error"
    node: str = ""
    at: str = ""
    key: tuple[str, ...] = ()
    """Lines with one key are one event (a JOB and a STEP line of one ending)."""


def stated_time(line: str) -> str | None:
    """The time a `*** ... CANCELLED AT <t> ***` line states (local, no zone), or None."""
    if "CANCELLED AT" not in line:
        return None
    m = _ENDED.search(line)
    return m.group("at") if m else None


def merged(held: dict[tuple[str, ...], dict[str, Any]], found: Finding, line: str) -> bool:
    """Whether `found` is already said by the record `held` for its key (the JOB and STEP
    lines of one ending), or adds to it (an OOM's task line names the node and rank of the
    OOM just recorded; the stepd line counts its kills): then that record is updated."""
    record = held.get(found.key) if found.key else None
    if record is None:
        return False
    attrs = record["attributes"]
    if found.key[0] == "ended":
        attrs["raw"] = raw_evidence(f"{attrs.get('raw', '')}\n{line}")
        return True
    names_node = bool(found.node) and "rank" not in attrs  # the stepd line names no task
    if not names_node and ("oom_kills" not in found.attributes or "oom_kills" in attrs):
        return False  # another OOM
    attrs.update({k: v for k, v in found.attributes.items() if k not in attrs})
    attrs["raw"] = raw_evidence(f"{attrs.get('raw', '')}\n{line}")
    if names_node:
        record.update(node=found.node, scope="rank", entity=f"rank-{attrs['rank']}")
    return True


def _first_task(tasks: str) -> int:
    return min(int(part.split("-")[0]) for part in tasks.split(",") if part)


def read(line: str) -> Finding | None:
    """The event one line of a job's output (or slurmd's log) reports, or None."""
    if "***" in line and (m := _ENDED.search(line)):
        why = " ".join((m.group("why") or "").split()).rstrip(",")
        node = m.group("node") or m.group("legacy") or ""
        node = "" if node.strip(".") == "" else node  # `ON ...`: the node left out
        ids = {"slurm_job_id": m.group("job")}
        if m.group("step"):
            ids["slurm_step"] = m.group("step")
        for prefix, (type_, reason) in _WHY.items():
            if why.startswith(prefix):
                attrs: dict[str, Any] = {"reason": reason, **ids}
                if node:
                    attrs["reported_on"] = node
                return Finding(type_, attrs, "warning" if type_ == "job.preempted" else "error",
                               "", m.group("at"), ("ended", m.group("job"), m.group("at")))
        if m.group("what") == "STEP" and not why:
            return None  # srun ending a step after a task failed: not an event of its own
        attrs = {"reason": why.lower() or "cancelled", **ids}
        if node:
            attrs["reported_on"] = node
        return Finding("job.cancelled", attrs, "warning", "", m.group("at"),
                       ("ended", m.group("job"), m.group("at")))
    if "srun" in line and (m := _TASKS.match(line)):
        what = m.group("what").strip()
        attrs = {"rank": _first_task(m.group("tasks")), "tasks": m.group("tasks")}
        if what.endswith("(core dumped)"):  # `Segmentation fault (core dumped)`
            what, attrs["core_dumped"] = what[:-len("(core dumped)")].strip(), True
        if what == "Out Of Memory":
            return Finding("job.oom", {**attrs, "kind": "host"}, node=m.group("node"),
                           key=("oom",))
        if code := _EXIT.match(what):
            return Finding("job.worker_exited", {**attrs, "exit_code": int(code.group("code"))},
                           node=m.group("node"))
        if what in _SIGNALS:
            return Finding("job.worker_exited", {**attrs, "signal": _SIGNALS[what]},
                           node=m.group("node"))
        return None  # Terminated: the step was cancelled; the cause is elsewhere
    if "oom" in line and (m := _OOM_EVENTS.search(line)):
        return Finding("job.oom", {"kind": "host", "oom_kills": int(m.group("n")),
                                   "slurm_step": m.group("step").rstrip(".")}, key=("oom",))
    if m := _NODE_FAILURE.match(line):
        return Finding("job.failed", {"reason": "NODE_FAIL", "failed_nodes": [m.group("node")]},
                       node=m.group("node"))
    if m := _PROLOG.match(line):
        return Finding("job.failed", {"reason": "Prolog failure",
                                      "failed_nodes": [m.group("node")]}, node=m.group("node"))
    return None
