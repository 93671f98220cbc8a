"""Impact: which attempts an incident hit, and what it cost them (docs/incidents.md has the
formula and the definitions of each phase)."""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from processors import gpu_time
from processors.gpu_time import Run
from processors.incidents import continuation, offenders, severity
from processors.incidents.book import AttemptKey, Progress, akey, jobref
from schemas import incident_events as ev
from schemas.events import Event

if TYPE_CHECKING:
    from processors.attempts import Attempt
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
    gpus, gpus_source = counted(attempt)
    if role == "failed":
        progress = book.progress.setdefault(key, progress)
        if progress.failed_at is None or time < progress.failed_at:
            progress.failed_at = time
        ckpt_at = progress.ckpt_at or (attempt.started_at if attempt else None)
        reported = reported_step(event)
        step, source = (reported, event.type) if reported is not None and event else \
            (progress.last_step, "progress" if progress.last_step is not None else "")
        payload = ev.JobImpacted(job=jobref(key), gpus=gpus, gpus_source=gpus_source,
                                 role=role, failed_at=time,
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
        payload = ev.JobImpacted(job=jobref(key), gpus=gpus, gpus_source=gpus_source,
                                 role=role)
    book.emit(inc_id, payload, time, rule, akey(key))
    severity.assess(ctx, inc_id, time, rule)
    if inc.key.startswith("node:") and role == "failed":
        offenders.failure(ctx, inc.key[5:], inc_id, akey(key), time)
    if inc.key.startswith("node:"):
        standing = book.open.get(f"lemon:{inc.key[5:]}")
        if standing is not None:
            book.emit(standing, ev.JobImpacted(job=jobref(key), gpus=gpus, role="linked"),
                      time, "repeat-offender", f"{inc_id}:{akey(key)}")


def counted(attempt: Attempt | None) -> tuple[int, str]:
    """The attempt's GPUs and what said them ((0, '') unknown)."""
    if attempt is None:
        return 0, ""
    if attempt.gpus > 0:
        return attempt.gpus, attempt.gpus_source
    if attempt.gpu_ids:
        return len(attempt.gpu_ids), f"allocation:{len(attempt.gpu_ids)} GPU ids"
    return 0, ""


def revise_gpus(ctx: Context, key: AttemptKey, time: datetime) -> None:
    """A better source said the attempt's GPUs after its incident counted them: the impact
    takes the new count (`gpus_revised`) and a loss already assessed is assessed again at
    the times it was (progress resumed, recovery verified)."""
    from processors import gpus as gpu_count

    book = ctx.book
    inc_id = book.by_attempt.get(key)
    if inc_id is None:
        return
    job = book.incidents[inc_id].jobs.get(akey(key))
    new = counted(book.attempt(key))
    if job is None or job.role != "failed" or new == (job.gpus, job.gpus_source) or not (
            gpu_count.better(new, (job.gpus, job.gpus_source)) or (
                new[0] == job.gpus and gpu_count.rank(new[1]) > gpu_count.rank(
                    job.gpus_source))):
        return
    book.emit(inc_id, ev.GpusRevised(job=jobref(key), gpus=new[0], gpus_source=new[1],
                                     previous=job.gpus, previous_source=job.gpus_source),
              time, "impact", f"gpus:{akey(key)}:{new[0]}:{new[1]}")
    if new[0] == job.gpus:
        return  # a better source of the same count: nothing to assess again
    if job.resumed_at is not None:
        assess(ctx, inc_id, key, new[0], job.resumed_at, final=False)
    if job.verified_at is not None:
        assess(ctx, inc_id, key, new[0], job.verified_at, final=True)
    if job.resumed_at is None:
        severity.assess(ctx, inc_id, time, "impact")


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


def preempted(ctx: Context, inc_id: str, failed: AttemptKey) -> bool:
    attempt = ctx.book.attempt(failed)
    return ctx.book.incidents[inc_id].klass == "preemption" or (
        attempt is not None and attempt.outcome == "preempted")


def runs(ctx: Context, job: tuple[str, str], inc_id: str, failed: AttemptKey) -> list[Run]:
    """The job's attempts as its GPU line needs them (`processors/gpu_time.py`): started,
    ended, failed (the first symptom), first step, checkpoints written and restored,
    requeued or preempted, the scheduler's pending reasons. A job resubmitted under a new
    id is on the line of the job it continues (`line_of`)."""
    book = ctx.book
    lineage = line_of(ctx, job)
    marks = tuple(sorted({m for _, _, a in lineage for m in a.pending}))
    out = []
    for number, key, attempt in lineage:
        if attempt.started_at is None:
            continue
        progress = book.progress.get(key, Progress())
        held = book.incidents[inc_id].jobs.get(akey(key)) if key == failed else None
        failed_at = held.failed_at if held is not None and held.failed_at else \
            progress.failed_at
        if failed_at is None and attempt.outcome in _FAILED and attempt.ended_at is not None \
                and any(n > number for n, _, _ in lineage):
            failed_at = attempt.ended_at
        out.append(Run(
            attempt=number, gpus=attempt.gpus or len(attempt.gpu_ids),
            started_at=attempt.started_at, ended_at=attempt.ended_at,
            submitted_at=attempt.submitted_at, failed_at=failed_at,
            first_step_at=progress.first_step_at, first_step=progress.first_step,
            checkpoints=tuple(progress.saved), started_saves=tuple(progress.started_saves),
            restored_step=progress.restored, restore_failed=progress.restore_failed,
            requeued=held_through(attempt, ctx.rules.requeue_held_s),
            preempted=attempt.outcome == "preempted" or (
                key == failed and ctx.book.incidents[inc_id].klass == "preemption"),
            pending=marks))
    return out


_FAILED = frozenset({"failed", "timeout", "preempted", "requeued"})


def held_through(attempt: Attempt, slack_s: float) -> bool:
    """Whether the job kept its place from the attempt's end to the next attempt: requeued
    as the attempt ended, or within `slack_s` (the rules' `requeue_held_s`: the scheduler,
    an automatic retry). A requeue logged long after the attempt ended FAILED (`scontrol
    requeue` of a finished job by its owner) held nothing in between: that wait is
    time-to-train delay (`not_held`), not GPUs held."""
    if attempt.requeued_at is None:
        return False
    return attempt.ended_at is None or (
        attempt.requeued_at - attempt.ended_at).total_seconds() <= slack_s


def line_of(ctx: Context, job: tuple[str, str]) -> list[tuple[int, AttemptKey, Attempt]]:
    """(track, attempt key, attempt) of every attempt on the job's GPU line: the first job
    of its lineage (the job it continues, resubmitted under a new id: `continuation`), then
    the jobs continuing that one, each job's attempts numbered after the previous job's.
    A job nobody continued and that continues none: its attempts under their own numbers."""
    book = ctx.book
    chain = continuation.ancestors(book, job)
    first = chain[-1] if chain else job
    out: list[tuple[int, AttemptKey, Attempt]] = []
    offset = 0
    for member in (first, *continuation.descendants(book, first)):
        record = book.jobs.get(member)
        if record is None:
            continue
        out += [(offset + n, (member[0], member[1], n), a)
                for n, a in sorted(record.attempts.items())]
        offset += max(record.attempts, default=0)
    return out


def track(ctx: Context, failed: AttemptKey) -> int:
    """The failed attempt's track on its job's GPU line (`line_of`)."""
    if not ctx.book.continued:
        return failed[2]
    return next((n for n, key, _ in line_of(ctx, (failed[0], failed[1])) if key == failed),
                failed[2])


def assess(ctx: Context, inc_id: str, failed: AttemptKey, gpus: int, now: datetime,
           final: bool) -> None:
    """The loss of a failed attempt, GPU time counted once over the job's line of GPU
    intervals (`processors/gpu_time.py`; docs/incidents.md has the worked examples):

        rework   = the work this failure threw away: from where the next attempt resumed
                   (its checkpoint; further back when the rerun fell back) to the failure,
                   a hang included
        downtime = the GPUs held after the failure: until the attempt ended, and the wait
                   for the next attempt while the scheduler held the allocation
        restore  = the next attempt's start-up until its first step (restart overhead;
                   the whole of a next attempt that failed before its first step)
        lost GPU-hours = the GPUs of each stretch x its length, each stretch charged once

    A preemption is the scheduler's decision: its loss is the rework alone. Reported beside
    it, not counted: `queue` (the wait behind other work, after a preemption), `unheld`
    (the attempt ended without a requeue: no GPUs held until the job was resubmitted:
    time-to-train delay) and, final, the job's `setback` (progress passed the failure step
    again - when it first reached it). Re-doing the thrown-away steps after the restore is
    that same work again, not a second loss. Assessed when progress resumes and again,
    final, when it passes the failure step; again when the attempt's GPU count is revised
    or the rerun shows it fell back. A failed checkpoint between the last good one and the
    failure would have saved (failed checkpoint - last good checkpoint) of the rework:
    that is charged to the checkpoint's own incident and taken off this one."""
    book = ctx.book
    job = book.incidents[inc_id].jobs[akey(failed)]
    failed_at = job.failed_at or now
    number = track(ctx, failed)
    line = gpu_time.charges(runs(ctx, (failed[0], failed[1]), inc_id, failed), now,
                            queued).get(number, gpu_time.Charge())
    thrown = [iv for iv in line.intervals if iv.kind == "thrown_away"
              and iv.track == number]
    start = min((iv.start for iv in thrown), default=failed_at)
    reached_at = job.failure_step_at or failed_at
    setback_s = max(0.0, (now - reached_at).total_seconds()) if final else 0.0
    restored = line.resumed_step if line.resumed_step is not None else \
        job.restored_step if job.restored_step is not None else job.last_checkpoint_step
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
    rework_s = line.rework_s - charge_s
    lost = round(max(0.0, line.gpu_hours - gpus * charge_s / 3600), 6) if gpus else 0.0
    assessed = ev.ImpactAssessed(
        job=jobref(failed), lost_gpu_hours=lost, lost_steps=lost_steps, rework_s=rework_s,
        downtime_s=line.downtime_s, restore_s=line.restore_s, queue_s=line.queue_s,
        unheld_s=line.unheld_s, setback_s=setback_s,
        charged_elsewhere_gpu_hours=round(gpus * charge_s / 3600, 6))
    book.emit(inc_id, assessed, now, "impact", _assessment(ctx, inc_id, failed, final,
                                                           assessed))
    severity.assess(ctx, inc_id, now, "impact")


def _assessment(ctx: Context, inc_id: str, failed: AttemptKey, final: bool,
                assessed: ev.ImpactAssessed) -> str:
    """The assessment's id: the first of each kind (progress resumed, final) keeps the id
    it always had; a later one with other figures (the GPUs revised, the rerun fell back)
    is a decision of its own, and the same figures again are none."""
    from processors.incidents.model import event_id

    base = f"{'final' if final else 'assess'}:{akey(failed)}"
    if event_id(inc_id, assessed.KIND, base) not in ctx.book.incidents[inc_id].applied:
        return base
    figures = assessed.model_dump_json(exclude={"setback_s"}).encode()
    return f"{base}:{hashlib.sha256(figures).hexdigest()[:12]}"
