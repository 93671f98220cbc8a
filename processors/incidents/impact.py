"""Impact: which attempts an incident hit, and what it cost them (docs/incidents.md has the
formula and the definitions of each phase)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from processors.incidents import offenders, severity
from processors.incidents.book import AttemptKey, Progress, akey, jobref
from schemas import incident_events as ev
from schemas.events import Event

if TYPE_CHECKING:
    from processors.incidents.context import Context


def impacted(ctx: Context, inc_id: str, key: AttemptKey, time: datetime, rule: str,
             role: str, event: Event | None = None) -> None:
    """The attempt joins the incident: `failed` (it died: recovery is followed, the loss is
    counted when progress resumes and again when it passes the failure step) or `degraded`
    (it went on, worse off). The failure step is the step the failure reported, else the
    last progress seen (later reports move it: `recovery.failure_step`)."""
    book = ctx.book
    inc = book.incidents[inc_id]
    if akey(key) in inc.jobs:
        return
    attempt = book.attempt(key)
    progress = book.progress.get(key, Progress())
    gpus = (attempt.gpus or len(attempt.gpu_ids)) if attempt else 0
    if role == "failed":
        ckpt_at = progress.ckpt_at or (attempt.started_at if attempt else None)
        reported = reported_step(event)
        step, source = (reported, event.type) if reported is not None and event else \
            (progress.last_step, "progress" if progress.last_step is not None else "")
        payload = ev.JobImpacted(job=jobref(key), gpus=gpus, role=role, failed_at=time,
                                 started_at=attempt.started_at if attempt else None,
                                 failure_step=step, failure_step_source=source,
                                 last_checkpoint_step=progress.ckpt_step,
                                 last_checkpoint_at=ckpt_at,
                                 failure_step_at=reached(progress, step, time))
        book.by_attempt[key] = inc_id
        book.pending.setdefault((key[0], key[1]), []).append((inc_id, key))
        book.push_timer(time + timedelta(seconds=ctx.rules.restart_deadline_s), "restart",
                        inc_id, key)
    else:
        payload = ev.JobImpacted(job=jobref(key), gpus=gpus, role=role)
    book.emit(inc_id, payload, time, rule, akey(key))
    severity.assess(ctx, inc_id, time, rule)
    if inc.key.startswith("node:") and role == "failed":
        offenders.failure(ctx, inc.key[5:], inc_id, akey(key), time)
    if inc.key.startswith("node:"):
        standing = book.open.get(f"lemon:{inc.key[5:]}")
        if standing is not None:
            book.emit(standing, ev.JobImpacted(job=jobref(key), gpus=gpus, role="linked"),
                      time, "repeat-offender", f"{inc_id}:{akey(key)}")


def reached(progress: Progress, step: int | None, time: datetime) -> datetime:
    """When the attempt first reached `step`: its progress report of it (or of a later
    step: the report is an upper bound), else `time` (it got there before it failed)."""
    if step is not None and progress.last_step is not None and progress.last_step_at and \
            progress.last_step >= step:
        return min(progress.last_step_at, time)
    return time


def reported_step(event: Event | None) -> int | None:
    """The step a failure says it stopped at (`job.failed`, a worker's exit)."""
    if event is None or event.type not in ("job.failed", "job.worker_exited"):
        return None
    step = event.attributes.get("step")
    return step if isinstance(step, int) and not isinstance(step, bool) else None


QUEUE_REASONS = ("priority", "qos", "assoc", "held", "quota", "begintime", "dependency",
                 "preempt", "reservation", "license", "partition", "maxjobs", "maxgres")
"""Pending reasons (Slurm's, Kueue's) that mean the job queued behind other work, waited for
a hold or a user, or was preempted: its GPUs were not held for it. `Resources` (and a
replacement node not yet available) is a restart waiting with its allocation held."""


def queued(reason: str) -> bool:
    low = reason.lower()
    return any(word in low for word in QUEUE_REASONS)


def wait_split(ctx: Context, failed: AttemptKey, failed_at: datetime,
               restarted_at: datetime, preempted: bool) -> tuple[float, float]:
    """(held, queue) seconds of the wait between the failure and the new attempt. Held until
    the scheduler says otherwise: each `job.pending` after the failure starts a stretch
    held or queued by its reason; after a preemption the whole wait is the queue's."""
    total = max(0.0, (restarted_at - failed_at).total_seconds())
    if preempted or total == 0:
        return (0.0, total)
    job = ctx.book.jobs.get((failed[0], failed[1]))
    marks = sorted({(at, reason) for a in (job.attempts.values() if job else ())
                    for at, reason in a.pending if failed_at < at < restarted_at})
    held = queue = 0.0
    since, queueing = failed_at, False
    for at, reason in marks:
        stretch = (at - since).total_seconds()
        queue, held = (queue + stretch, held) if queueing else (queue, held + stretch)
        since, queueing = at, queued(reason)
    stretch = (restarted_at - since).total_seconds()
    return (held, queue + stretch) if queueing else (held + stretch, queue)


def preempted(ctx: Context, inc_id: str, failed: AttemptKey) -> bool:
    attempt = ctx.book.attempt(failed)
    return ctx.book.incidents[inc_id].klass == "preemption" or (
        attempt is not None and attempt.outcome == "preempted")


def assess(ctx: Context, inc_id: str, failed: AttemptKey, gpus: int, now: datetime,
           final: bool) -> None:
    """The loss of a failed attempt, GPU time counted once (productive time once, the rest
    is badput; docs/incidents.md has the worked example):

        rework   = failure - last good checkpoint    (work thrown away, a hang included)
        downtime = the wait from the failure to the new attempt while the job's GPUs were
                   held for it (`wait_split`)
        restore  = progress resumed - restarted      (restart overhead)
        lost GPU-hours = GPUs x (rework + downtime + restore) / 3600

    A preemption is the scheduler's decision: its loss is the rework alone. Reported beside
    it, not counted: `queue` (the rest of the wait) and, final, the job's `setback` (progress
    passed the failure step again - when it first reached it). Re-doing the thrown-away
    steps after the restore is that same work again, not a second loss. Assessed when
    progress resumes and again, final, when it passes the failure step. A failed checkpoint
    between the last good one and the failure would have saved (failed checkpoint - last
    good checkpoint) of the rework: that is charged to the checkpoint's own incident and
    taken off this one."""
    book = ctx.book
    job = book.incidents[inc_id].jobs[akey(failed)]
    failed_at = job.failed_at or now
    start = job.last_checkpoint_at or failed_at
    resumed_at = job.resumed_at or now
    restarted_at = job.restarted_at or resumed_at
    rework_s = (failed_at - start).total_seconds()
    scheduled = preempted(ctx, inc_id, failed)
    downtime_s, queue_s = wait_split(ctx, failed, failed_at, restarted_at, scheduled)
    restore_s = 0.0 if scheduled else max(0.0, (resumed_at - restarted_at).total_seconds())
    reached_at = job.failure_step_at or failed_at
    setback_s = max(0.0, (now - reached_at).total_seconds()) if final else 0.0
    restored = job.restored_step if job.restored_step is not None else \
        job.last_checkpoint_step
    lost_steps = max(0, (job.failure_step or 0) - (restored or 0)) \
        if job.failure_step is not None else 0
    charge_s = 0.0
    progress = book.progress.get(failed)
    if progress and progress.failed_ckpt and progress.failed_ckpt[1] != inc_id:
        failed_ckpt_at, ckpt_inc = progress.failed_ckpt
        if start <= failed_ckpt_at <= failed_at:
            charge_s = (failed_ckpt_at - start).total_seconds()
            book.emit(ckpt_inc, ev.ImpactAssessed(
                charged_gpu_hours=round(gpus * charge_s / 3600, 6), from_incident=inc_id,
                job=jobref(failed), role="degraded",
                why="the failed checkpoint would have saved this work"), now,
                "impact", f"charge:{inc_id}:{akey(failed)}")
            severity.assess(ctx, ckpt_inc, now, "impact")
    if job.resumed_at is None:
        book.emit(inc_id, ev.RecoveryObserved(job=jobref(failed), stage="progress_resumed",
                                              resumed_at=now),
                  now, "recovery", f"resumed:{akey(failed)}")
    rework_s -= charge_s
    total_s = rework_s + downtime_s + restore_s
    book.emit(inc_id, ev.ImpactAssessed(
        job=jobref(failed), lost_gpu_hours=round(gpus * total_s / 3600, 6),
        lost_steps=lost_steps, rework_s=rework_s, downtime_s=downtime_s, restore_s=restore_s,
        queue_s=queue_s, setback_s=setback_s,
        charged_elsewhere_gpu_hours=round(gpus * charge_s / 3600, 6)),
        now, "impact", f"{'final' if final else 'assess'}:{akey(failed)}")
    severity.assess(ctx, inc_id, now, "impact")
