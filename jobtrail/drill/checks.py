"""The drill's verdict, from jobtrail's records only: each check with the evidence it rests on
and the basis (which records it read), and the recovery times. Pure: `judge(facts)` gives
the checks, so every check can be shown to fail on a sabotaged recovery without a cluster
(tests/drill/test_checks.py); `jobtrail.drill.run` gathers the facts from a live drill.

Restore and progress are judged from the rerun's own logged steps, never from a checkpoint's
name or a restore message: the rerun restored the last good checkpoint when the first step it
logs after starting is that checkpoint's step + 1, and it progressed when a step it logs
passes the failure step (the last step the faulted attempt logged).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from jobtrail.drill.report import Check

ENDS = {"job.requeued", "job.failed", "job.cancelled", "job.timeout", "job.completed",
        "job.preempted"}
SYMPTOMS = {"job.worker_exited", "job.failed", "job.requeued", "job.cancelled",
            "node.not_ready", "node.drained", "checkpoint.failed", "comm.nccl_timeout",
            "comm.nccl_error"}
TIMED = "incident within 10 s of the first symptom received"
STEPS = "the rerun's own job.step lines"


@dataclass
class Fallback:
    """What the drill's stop / clean up / resubmit path did (when recovery in place failed)."""

    why: str
    stopped: bool
    """Nothing of the old job is left running (squeue)."""
    stopped_detail: str
    cleaned: bool
    """What the fault broke is repaired (the node resumed, the directory or link back)."""
    cleaned_detail: str
    job_id: str
    """The resubmitted job."""


@dataclass
class Facts:
    job_id: str
    t0: float
    """The injection (epoch seconds)."""
    first: list[dict[str, Any]]
    """The drilled job's timeline (every attempt)."""
    recovery: list[dict[str, Any]]
    """The timeline of the job that recovered: the same rows, or the resubmitted job's."""
    recovery_job: str
    symptom: dict[str, Any] | None = None
    incident: dict[str, Any] | None = None
    detection_s: float | None = None
    scheduler_s: float | None = None
    jobtrail_s: float | None = None
    charged_gpu_hours: float = 0.0
    gpus: int = 0
    fallback: Fallback | None = None
    faulted: int = 1
    notes: list[str] = field(default_factory=list)


@dataclass
class Verdict:
    checks: list[Check]
    restart_s: float | None
    """The fault -> the rerun's start (the new attempt's, or the resubmitted job's, job.started)."""
    recovery_s: float | None
    """The fault -> the first step the rerun logged past the failure step."""
    lost_gpu_hours: float
    failure_step: int | None
    restored_step: int | None
    first_rerun_step: int | None


def epoch(value: Any) -> float:
    assert isinstance(value, datetime)
    return value.replace(tzinfo=value.tzinfo or UTC).timestamp()


def iso(value: Any) -> str:
    if isinstance(value, datetime):
        return value.replace(tzinfo=value.tzinfo or UTC).isoformat(timespec="milliseconds")
    if isinstance(value, float):
        return datetime.fromtimestamp(value, UTC).isoformat(timespec="milliseconds")
    return str(value)


def ev(row: dict[str, Any]) -> dict[str, Any]:
    out = {"event_id": row["event_id"], "type": row["type"], "attempt": row["attempt"],
           "time": iso(row["time"])}
    step = (row.get("attributes") or {}).get("step")
    if step is not None:
        out["step"] = step
    if row.get("job_id"):
        out["job_id"] = row["job_id"]
    return out


def _step(row: dict[str, Any]) -> int:
    value = (row.get("attributes") or {}).get("step")
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else -1


def _ordered(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: (epoch(r["time"]), str(r["event_id"])))


def rerun_attempt(facts: Facts) -> int | None:
    """The attempt that is the recovery: on the resubmitted job its first; in place, the first
    attempt after the faulted one that started."""
    started = sorted({r["attempt"] for r in facts.recovery if r["type"] == "job.started"
                      and (facts.fallback is not None or r["attempt"] > facts.faulted)})
    return started[0] if started else None


def judge(facts: Facts) -> Verdict:
    first = _ordered(facts.first)
    a1 = [r for r in first if r["attempt"] == facts.faulted]
    rows = _ordered(facts.recovery)
    c: list[Check] = []

    # detection
    c.append(Check(
        "failure detected", facts.symptom is not None and facts.incident is not None,
        (f"incident {facts.detection_s} s after the injection (first symptom received after "
         f"{facts.scheduler_s} s, incident {facts.jobtrail_s} s later)")
        if facts.incident is not None and facts.symptom is not None
        else "no incident holding the faulted attempt" if facts.symptom is not None
        else "no failure event of the job or its node after the injection",
        [ev(facts.symptom)] if facts.symptom else [],
        basis="the first failure event on the job's timeline after the injection, and the "
              "incident log's job_impacted entry for the faulted attempt"))
    c.append(Check(TIMED, facts.jobtrail_s is not None and facts.jobtrail_s <= 10,
                   f"jobtrail's share {facts.jobtrail_s} s (goal 10 s)",
                   basis="the symptom's observed_at and the time the incident log held the "
                         "attempt"))
    ends = [r for r in a1 if r["type"] in ENDS and epoch(r["time"]) >= facts.t0 - 1]
    c.append(Check("attempt stopped", bool(ends),
                   f"attempt {facts.faulted} ended: {ends[0]['type']}" if ends
                   else f"attempt {facts.faulted} has no end after the fault",
                   [ev(r) for r in ends[:1]],
                   basis="the faulted attempt's end on the scheduler's record"))

    # the platform's recovery: the same job, requeued (Slurm, or the launcher's policy)
    requeued = [r for r in first if r["type"] == "job.started" and r["attempt"] > facts.faulted]
    ended_for_good = [r for r in a1 if r["type"] in ENDS - {"job.requeued"}
                      and epoch(r["time"]) >= facts.t0 - 1]
    c.append(Check(
        "job requeued or resubmitted", bool(requeued),
        f"attempt {requeued[0]['attempt']} of job {facts.job_id} started"
        if requeued else
        f"job {facts.job_id} was not requeued: attempt {facts.faulted} ended "
        f"{ended_for_good[0]['type']} and no attempt followed"
        + (f" ({(ended_for_good[0].get('attributes') or {}).get('reason')})"
           if (ended_for_good[0].get("attributes") or {}).get("reason") else "")
        if ended_for_good else f"no new attempt of job {facts.job_id} started",
        [ev(r) for r in (requeued or ended_for_good)[:1]],
        basis="a later attempt's job.started on the job's own timeline (the drill's own "
              "resubmission is the separate stop / clean up / resubmit check)"))
    fb = facts.fallback
    resubmitted = [r for r in rows if r["type"] == "job.started"] if fb else []
    if fb is not None:
        ok = fb.stopped and fb.cleaned and bool(resubmitted)
        c.append(Check(
            "stop, clean up, resubmit", ok,
            f"{fb.why}; stopped: {fb.stopped_detail}; cleaned up: {fb.cleaned_detail}; "
            + (f"resubmitted as job {fb.job_id}, started "
               f"{iso(resubmitted[0]['time'])}" if resubmitted
               else f"resubmitted job {fb.job_id or '(none)'} never started"),
            [ev(r) for r in resubmitted[:1]],
            basis="squeue (nothing of the old job left), sinfo / the run directory (what the "
                  "fault broke is back), and the resubmitted job's job.started"))

    # restore and progress, from the rerun's own steps
    rerun = rerun_attempt(facts)
    # the faulted attempt's last finished save, even one logged a moment after the injection
    # (a node set down or a link cut does not stop the process that instant): it is on disk
    saved = [r for r in a1 if r["type"] == "checkpoint.saved"]
    last = _step(saved[-1]) if saved else None
    mine = [r for r in rows if r["attempt"] == rerun] if rerun is not None else []
    started = [r for r in mine if r["type"] == "job.started"]
    steps = [r for r in mine if r["type"] == "job.step"]
    restore_lines = [r for r in mine if r["type"] == "checkpoint.restored"]
    first_step = _step(steps[0]) if steps else None
    claimed = _step(restore_lines[0]) if restore_lines else None
    restored = first_step is not None and last is not None and first_step == last + 1 \
        and (claimed is None or claimed == last)
    where = f"job {facts.recovery_job} attempt {rerun}" if rerun is not None else "no rerun"
    if first_step is None:
        detail = f"{where} logged no step (the faulted attempt's last checkpoint: step {last})"
    else:
        detail = (f"{where}'s first step is {first_step}: it resumed from step "
                  f"{first_step - 1}; the faulted attempt's last checkpoint is step "
                  f"{last}" + (f"; its restore line names step {claimed}"
                               if claimed is not None else "; it logged no restore line"))
        if first_step == 1 and last:
            detail += " (it started over)"
    c.append(Check("last checkpoint restored", restored, detail,
                   [ev(r) for r in saved[-1:] + restore_lines[:1] + steps[:1]],
                   basis=f"{STEPS}: the first step after the start = the last saved "
                         "checkpoint's step + 1 (the restore line, if any, must agree)"))
    fail_step = max((_step(r) for r in a1 if r["type"] == "job.step"), default=None)
    past = [r for r in steps if fail_step is not None and _step(r) > fail_step]
    c.append(Check(
        "progress past the failure step", bool(past),
        f"failure at step {fail_step}; {where} logged steps "
        f"{_step(steps[0]) if steps else '-'}..{_step(steps[-1]) if steps else '-'}"
        + (f", past it at step {_step(past[0])}" if past else ", never past it"),
        [ev(r) for r in past[:1]],
        basis=f"{STEPS} against the last step the faulted attempt logged"))

    # no duplicate run
    last_old = max((epoch(r["time"]) for r in a1 if r["type"] == "job.step"), default=0.0)
    new_start = epoch(started[0]["time"]) if started else None
    dup_flag = any(j.get("duplicate_run") for j in (facts.incident or {}).get("jobs", []))
    old_after = [r for r in a1 if r["type"] == "job.step" and new_start is not None
                 and epoch(r["time"]) > new_start]
    c.append(Check(
        "no duplicate run", new_start is not None and last_old <= new_start and not dup_flag,
        f"attempt {facts.faulted}'s last step at {iso(last_old)}, the rerun started at "
        f"{iso(new_start) if new_start is not None else 'n/a'}"
        + (f"; {len(old_after)} step(s) of the old attempt after it" if old_after else "")
        + ("; the incident flagged a duplicate run" if dup_flag else ""),
        [ev(r) for r in started[:1] + old_after[:1]],
        basis="the old attempt's last job.step against the rerun's job.started, and the "
              "incident's duplicate_run flag"))

    # lost GPU time
    own = _lost(facts, saved, steps, a1)
    lost = round(facts.charged_gpu_hours or own, 6)
    if facts.charged_gpu_hours:
        detail = (f"{facts.charged_gpu_hours:.4f} GPU-h charged by the incident (GPUs x "
                  f"(work since the last checkpoint + restart until progress resumed)); from "
                  f"the timeline {own:.4f} GPU-h")
        basis = "the incident's impact (job_impacted / impact_assessed)"
    else:
        detail = (f"the incident charged nothing (a resubmission is a new job it does not "
                  f"link); from the timeline {own:.4f} GPU-h ({facts.gpus} GPUs x (fault - "
                  "last checkpoint + fault -> progress resumed))")
        basis = "the timeline: the attempt's GPUs, its last checkpoint, its end, the rerun's " \
                "first step"
    c.append(Check("lost GPU time", lost > 0, detail, [ev(r) for r in saved[-1:] + steps[:1]],
                   basis=basis))

    restart_s = round(new_start - facts.t0, 2) if new_start is not None else None
    recovery_s = round(epoch(past[0]["time"]) - facts.t0, 2) if past else None
    return Verdict(c, restart_s, recovery_s, lost, fail_step,
                   first_step - 1 if first_step is not None else None, first_step)


def _lost(facts: Facts, saved: list[dict[str, Any]], resumed: list[dict[str, Any]],
          a1: list[dict[str, Any]]) -> float:
    """DESIGN §9: GPUs x (work thrown away since the last checkpoint + restart until
    progress resumes); re-doing the thrown-away steps is not a second loss."""
    ends = [r for r in a1 if r["type"] in ENDS | {"job.worker_exited", "comm.nccl_timeout"}
            and epoch(r["time"]) >= facts.t0 - 1]
    if not (saved and resumed and ends):
        return 0.0
    failed = min(epoch(r["time"]) for r in ends)
    thrown = failed - epoch(saved[-1]["time"])
    overhead = epoch(resumed[0]["time"]) - failed
    return round(facts.gpus * max(0.0, thrown + overhead) / 3600, 6)
