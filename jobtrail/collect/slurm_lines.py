"""What the Slurm collector reads in slurmctld's lines and squeue's records: the lines it
follows (drain, down, requeue, preemption, allocation), the wait status 22.05 prints, a job's
GPUs and name, a drill's tag (`jobtrail.collect.slurm`)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from ingest.hostlist import expand_indices
from jobtrail.collect.slurm_cursor import Cursor

_NODE_LINE = re.compile(r"update_node: node |Nodes? \S+ not responding|Node \S+ now responding|"
                        r"node \S+ returned to service")
_REASON_LINE = re.compile(r"update_node: node \S+ reason set to: ")
_DOWN = re.compile(r"update_node: node (?P<node>\S+) state set to (?:DOWN|FAIL)|"
                   r"Nodes? (?P<nodes>\S+) not responding, setting DOWN")
# a job as slurmctld names it: `8`, an array task `1_0(3)` (array 1, task 0, its own id 3)
_JOB = r"(?P<job>\d+(?:_\d+)?)(?:\(\d+\))?"
_REQUEUING = re.compile(rf"Requeuing JobId={_JOB}")
_FAILED_NODE = re.compile(rf"requeue job JobId={_JOB} due to failure of node (?P<node>\S+)")
_PREEMPT = re.compile(rf"preempted JobId={_JOB} has been requeued")
_ALLOC = re.compile(r"(?:sched: Allocate JobId=(?P<a>\d+(?:_\d+)?)(?:\(\d+\))? "
                    r"NodeList=(?P<an>\S+)|_start_job: Started JobId=(?P<b>\d+(?:_\d+)?)"
                    r"(?:\(\d+\))? in \S+ on (?P<bn>\S+))")
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


def job_name(job: dict[str, Any]) -> str | None:
    """The job as users and slurmctld's log name it: an array task is `<array>_<task>` (its
    own job id is another number, and the array's last task reuses the array's id); the
    array's tasks still pending together (`array_task_string`) are None."""
    array, task = job.get("array_job_id"), job.get("array_task_id")
    if isinstance(array, int) and array > 0 and not isinstance(array, bool):
        if isinstance(task, int) and not isinstance(task, bool):
            return f"{array}_{task}"
        if job.get("array_task_string"):
            return None
    return str(job["job_id"])


def _tag_drill(draft: dict[str, Any], cursor: Cursor) -> None:
    """Mark the events of a recovery drill (its job, or a node state it set) so its incident
    is recorded as a drill."""
    attrs = draft.setdefault("attributes", {})
    drill = cursor.drills.get(str(draft.get("job_id") or ""))
    if drill is None and (m := _DRILL_REASON.search(str(attrs.get("reason") or ""))):
        drill = m.group("drill")
    if drill:
        attrs["drill"] = drill
