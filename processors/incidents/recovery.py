"""Recovery: follow a failed attempt's job until it is really back.

Restarted (a new attempt started; `duplicate_run` when the old one had not ended), restored
(a checkpoint loaded), progress resumed (the loss is assessed then), verified (a step passed
the failure point). No new attempt within `restart_deadline_s` flags `no_restart`.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from processors.incidents import continuation, correlate, impact, saves, severity, slowdown
from processors.incidents.book import AttemptKey, Progress, akey, jobref
from schemas import incident_events as ev
from schemas.events import Event

if TYPE_CHECKING:
    from processors.incidents.context import Context


def track(ctx: Context, event: Event) -> None:
    """Progress of the event's attempt, and what it means for pending recoveries."""
    key = ctx.book.attempt_key(event)
    progress = ctx.book.progress.get(key)
    if progress is None:  # not setdefault: a Progress per event was a cost per event
        progress = ctx.book.progress[key] = Progress()
    attrs: dict[str, Any] = event.attributes
    if event.type == "job.step" and isinstance(attrs.get("step"), int):
        if progress.first_step_at is None or event.time < progress.first_step_at:
            progress.first_step, progress.first_step_at = attrs["step"], event.time
        progress.last_step, progress.last_step_at = attrs["step"], event.time
        progress.last_step_event = event.id
        slowdown.arm_hang(ctx, progress, key)
        step_time = attrs.get("step_time_s")
        if isinstance(step_time, (int, float)) and not isinstance(step_time, bool):
            slowdown.sample(ctx, event, key, progress, float(step_time))
        failure_step(ctx, event, key, attrs["step"], "progress")
        progressed(ctx, event, key, attrs["step"])
    elif event.type in ("job.failed", "job.worker_exited") and \
            (reported := impact.reported_step(event)) is not None:
        failure_step(ctx, event, key, reported, event.type)
    elif event.type == "checkpoint.saved" and isinstance(attrs.get("step"), int):
        saves.saved(progress, attrs["step"], event.time)
        continuation.saved(ctx.book, event, key)
        progress.ckpt_step, progress.ckpt_at = attrs["step"], event.time
        progress.failed_ckpt = None
        # a checkpoint is progress too: a slow save is not a hang
        progress.last_step_at, progress.last_step_event = event.time, event.id
        slowdown.arm_hang(ctx, progress, key)
        correlate.saved(ctx, event, key, progress)
    elif event.type == "checkpoint.restored" and isinstance(attrs.get("step"), int):
        progress.restored, progress.restore_failed = attrs["step"], False
        _continues(ctx, event, key)
        restored(ctx, event, key, attrs["step"])
    elif event.type == "checkpoint.started" and isinstance(attrs.get("step"), int):
        saves.started(progress, attrs["step"], event.time)
    elif event.type == "checkpoint.failed":
        saves.failed(progress, attrs, event.time)
    elif event.type == "job.started":
        restarted(ctx, event, key)
    if event.type in _ENDED:
        slowdown.attempt_ended(ctx, key, event.time)


_ENDED = frozenset({"job.completed", "job.failed", "job.cancelled", "job.timeout",
                    "job.requeued", "job.preempted"})


def _pending(ctx: Context, key: AttemptKey) -> list[tuple[str, AttemptKey]]:
    """Failed attempts still waiting for their recovery to be verified that `key` follows:
    earlier attempts of the same job, and every attempt of the jobs its job continues
    (resubmitted under a new id: `continuation`)."""
    book = ctx.book
    out = [(inc_id, failed) for inc_id, failed in book.pending.get((key[0], key[1]), [])
           if failed[2] < key[2]]
    for job in continuation.ancestors(book, (key[0], key[1])):
        out += book.pending.get(job, [])
    return out


def _done(ctx: Context, inc_id: str, failed: AttemptKey) -> None:
    """The failed attempt's recovery was verified: it waits no longer."""
    pending = ctx.book.pending.get((failed[0], failed[1]), [])
    if (inc_id, failed) in pending:
        pending.remove((inc_id, failed))


def _same(failed: AttemptKey, key: AttemptKey) -> bool:
    return (failed[0], failed[1]) == (key[0], key[1])


def _continues(ctx: Context, event: Event, key: AttemptKey) -> None:
    """The restore names a checkpoint an earlier job of the project saved: the new job
    continues it, and its attempt (started already) is the restart of that job's failures
    still waiting for one."""
    if continuation.link(ctx.book, event, key) is None:
        return
    attempt = ctx.book.attempt(key)
    if attempt is not None and attempt.started_at is not None and \
            attempt.started_at <= event.time:
        restarted(ctx, event, key, attempt.started_at)


def restored(ctx: Context, event: Event, key: AttemptKey, step: int) -> None:
    for inc_id, failed in _pending(ctx, key):
        other = None if _same(failed, key) else key[1]
        payload = ev.RecoveryObserved(job=jobref(failed), stage="restored", restored_step=step,
                                      by_attempt=key[2])
        ctx.book.emit(inc_id, payload, event.time, "recovery",
                      f"restored:{akey(failed)}:{_by(failed, key)}")
        ctx.book.evidence(inc_id, event, "recovery", "restored from checkpoint" if other is None
                          else f"job {other} restored this job's checkpoint", "recovery", key)


def _by(failed: AttemptKey, key: AttemptKey) -> str:
    """The restart's part of a decision id: its attempt number, `job/attempt` when it ran
    under another job id (the ids of a same-job restart stay as they always were)."""
    return str(key[2]) if _same(failed, key) else f"{key[1]}/{key[2]}"


def restarted(ctx: Context, event: Event, key: AttemptKey,
              at: datetime | None = None) -> None:
    """A new attempt started (at `at`, else the event's time): the restart of the failures
    still waiting for one (a failure that was restarted already keeps its restart: a later
    attempt is that restart's failure's, whose GPU time it is charged to)."""
    when = at or event.time
    for inc_id, failed in _pending(ctx, key):
        held = ctx.book.incidents[inc_id].jobs.get(akey(failed))
        other = None if _same(failed, key) else key[1]
        if held is not None and held.restarted_attempt is not None and (
                held.restarted_attempt, held.restarted_job) != (key[2], other):
            continue
        old = ctx.book.attempt(failed)
        overlap = old is not None and (old.ended_at is None or old.ended_at > when)
        fields: dict[str, Any] = {"restarted_job": other} if other is not None else {}
        if overlap:
            fields["duplicate_run"] = True
        payload = ev.RecoveryObserved(job=jobref(failed), stage="restarted",
                                      restarted_attempt=key[2], restarted_at=when, **fields)
        ctx.book.emit(inc_id, payload, event.time, "recovery",
                      f"restarted:{akey(failed)}:{_by(failed, key)}")
        ctx.book.evidence(inc_id, event, "recovery", f"attempt {key[2]} started" if other is None
                          else f"job {other} (attempt {key[2]}) restored this job's checkpoint",
                          "recovery", key)
        if overlap:
            severity.flag(ctx, inc_id, "duplicate_run", event.time, "recovery",
                          f"attempt {key[2]} started while attempt {failed[2]} was still "
                          "running" if other is None else f"job {other} started while "
                          f"attempt {failed[2]} of job {failed[1]} was still running")
    _progress_before_start(ctx, event, key, when)


def _progress_before_start(ctx: Context, event: Event, key: AttemptKey,
                           when: datetime) -> None:
    """The new attempt's own progress arrived before its start did (the training log
    imported before the scheduler's, past the lateness horizon): the loss is assessed at
    its first step and, when its last step is past the failure step, recovery verified
    then, as if the steps had come after the start."""
    progress = ctx.book.progress.get(key)
    if progress is None or progress.first_step_at is None or progress.last_step is None or \
            progress.last_step_at is None or progress.first_step_at < when:
        return
    for inc_id, failed in _pending(ctx, key):
        job = ctx.book.incidents[inc_id].jobs.get(akey(failed))
        if job is None or job.role != "failed":
            continue
        if job.resumed_at is None:
            impact.assess(ctx, inc_id, failed, job.gpus, progress.first_step_at, final=False)
        job = ctx.book.incidents[inc_id].jobs[akey(failed)]
        if progress.last_step > (job.failure_step if job.failure_step is not None else -1):
            at = progress.last_step_at
            impact.assess(ctx, inc_id, failed, job.gpus, at, final=True)
            job = ctx.book.incidents[inc_id].jobs[akey(failed)]
            ctx.book.emit(inc_id, ev.RecoveryVerified(job=jobref(failed), verified_at=at,
                                                      step=progress.last_step,
                                                      past=job.failure_step),
                          at, "recovery", f"verified:{akey(failed)}")
            ctx.book.evidence(inc_id, event, "recovery",
                              f"attempt {key[2]} had logged step {progress.last_step}, past "
                              f"the failure point ({job.failure_step}), before its start "
                              "arrived", "recovery", key)
            _done(ctx, inc_id, failed)


def failure_step(ctx: Context, event: Event, key: AttemptKey, step: int, source: str) -> None:
    """Where a failed attempt stopped, from the best evidence: the step its failure
    reported wins; otherwise a progress report of the attempt that arrives after its first
    symptom (logs lag) moves it forward."""
    inc_id = ctx.book.by_attempt.get(key)
    if inc_id is None:
        return
    job = ctx.book.incidents[inc_id].jobs.get(akey(key))
    if job is None or job.role != "failed" or job.resumed_at is not None:
        return
    if source == "progress":
        attempt = ctx.book.attempt(key)
        if job.failure_step_source in ("job.failed", "job.worker_exited") or (
                job.failure_step is not None and step <= job.failure_step) or (
                attempt is not None and attempt.ended_at is not None
                and event.time > attempt.ended_at):
            return
    elif job.failure_step == step and job.failure_step_source in ("job.failed",
                                                                  "job.worker_exited"):
        return
    at = event.time if source == "progress" else impact.reached(
        ctx.book.progress.get(key, Progress()), step, job.failed_at or event.time)
    ctx.book.emit(inc_id, ev.FailureStepUpdated(job=jobref(key), failure_step=step,
                                                failure_step_source=source, event_id=event.id,
                                                failure_step_at=at),
                  event.time, "impact", f"failure-step:{akey(key)}:{event.id}")


def progressed(ctx: Context, event: Event, key: AttemptKey, step: int) -> None:
    for inc_id, failed in _pending(ctx, key):
        job = ctx.book.incidents[inc_id].jobs.get(akey(failed))
        if job is None:
            continue
        if job.resumed_at is None:
            impact.assess(ctx, inc_id, failed, job.gpus, event.time, final=False)
            job = ctx.book.incidents[inc_id].jobs[akey(failed)]
        target = job.failure_step if job.failure_step is not None else -1
        if step > target:
            impact.assess(ctx, inc_id, failed, job.gpus, event.time, final=True)
            job = ctx.book.incidents[inc_id].jobs[akey(failed)]
            ctx.book.emit(inc_id, ev.RecoveryVerified(job=jobref(failed), verified_at=event.time,
                                                      step=step, past=job.failure_step),
                          event.time, "recovery", f"verified:{akey(failed)}")
            ctx.book.evidence(inc_id, event, "recovery",
                              f"step {step} passed the failure point ({job.failure_step})",
                              "recovery", key)
            _done(ctx, inc_id, failed)


def deadline(ctx: Context, when: datetime, inc_id: str, key: AttemptKey) -> None:
    """The restart deadline of a failed attempt passed."""
    inc = ctx.book.incidents.get(inc_id)
    if inc is None or not inc.active:
        return
    job = inc.jobs.get(akey(key))
    if job is None or job.restarted_attempt is not None:
        return
    minutes = ctx.rules.restart_deadline_s / 60
    waiting = waiting_for(ctx, inc_id, key, job.failed_at or when, when)
    if waiting:  # the scheduler's or the user's turn: not the cluster failing to restart it
        severity.flag(ctx, inc_id, "waiting", when, "restart-deadline",
                      f"{akey(key)} not restarted within {minutes:.0f} min: {waiting}")
        return
    severity.flag(ctx, inc_id, "no_restart", when, "restart-deadline",
                  f"{akey(key)} not restarted within {minutes:.0f} min")


def waiting_for(ctx: Context, inc_id: str, key: AttemptKey, failed_at: datetime,
                now: datetime) -> str:
    """Why a failed attempt's job is not back yet when that is not the cluster's doing: it
    was preempted, or the scheduler's latest pending reason since the failure queues it
    behind other work or holds it for its user ('' otherwise)."""
    if impact.preempted(ctx, inc_id, key):
        return "waiting for the scheduler after a preemption"
    job = ctx.book.jobs.get((key[0], key[1]))
    marks = sorted((at, reason) for a in (job.attempts.values() if job else ())
                   for at, reason in a.pending if failed_at < at <= now)
    if not marks or not impact.queued(marks[-1][1]):
        return ""
    reason = marks[-1][1]
    whose = "its user" if "user" in reason.lower() else "the scheduler"
    return f"waiting for {whose} (pending: {reason})"
