"""Impact: which attempts an incident hit, and what it cost them (docs/incidents.md has the
formula and the definitions of each phase)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from processors.incidents import severity
from processors.incidents.book import AttemptKey, Progress, akey, jobref
from schemas import incident_events as ev
from schemas.events import Event

if TYPE_CHECKING:
    from processors.incidents.detector import Detector


def impacted(d: Detector, inc_id: str, key: AttemptKey, time: datetime, rule: str,
             role: str, event: Event | None = None) -> None:
    """The attempt joins the incident: `failed` (it died: recovery is followed, the loss is
    counted when progress resumes and again when it passes the failure step) or `degraded`
    (it went on, worse off). The failure step is the step the failure reported, else the
    last progress seen (later reports move it: `recovery.failure_step`)."""
    book = d.book
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
                                 last_checkpoint_at=ckpt_at)
        book.by_attempt[key] = inc_id
        book.pending.setdefault((key[0], key[1]), []).append((inc_id, key))
        book.push_timer(time + timedelta(seconds=d.rules.restart_deadline_s), "restart",
                        inc_id, key)
    else:
        payload = ev.JobImpacted(job=jobref(key), gpus=gpus, role=role)
    book.emit(inc_id, payload, time, rule, akey(key))
    severity.assess(d, inc_id, time, rule)
    if inc.key.startswith("node:") and role == "failed":
        from processors.incidents import offenders

        offenders.failure(d, inc.key[5:], inc_id, akey(key), time)
    if inc.key.startswith("node:"):
        standing = book.open.get(f"lemon:{inc.key[5:]}")
        if standing is not None:
            book.emit(standing, ev.JobImpacted(job=jobref(key), gpus=gpus, role="linked"),
                      time, "repeat-offender", f"{inc_id}:{akey(key)}")


def reported_step(event: Event | None) -> int | None:
    """The step a failure says it stopped at (`job.failed`, a worker's exit)."""
    if event is None or event.type not in ("job.failed", "job.worker_exited"):
        return None
    step = event.attributes.get("step")
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def assess(d: Detector, inc_id: str, failed: AttemptKey, gpus: int, now: Event,
           final: bool) -> None:
    """The loss of a failed attempt, split by phase:

        rework    = failure - last good checkpoint      (work done, then lost)
        downtime  = restarted - failure                 (nothing running)
        restore   = progress resumed - restarted        (starting, loading the checkpoint)
        recompute = progress passed the failure step - progress resumed  (re-doing steps)
        lost GPU-hours = GPUs x (rework + downtime + restore + recompute) / 3600

    Assessed when progress resumes (recompute still 0) and again, final, when it passes the
    failure step. A failed checkpoint between the last good one and the failure would have
    saved (failed checkpoint - last good checkpoint) of the rework: that is charged to the
    checkpoint's own incident and taken off this one."""
    book = d.book
    job = book.incidents[inc_id].jobs[akey(failed)]
    failed_at = job.failed_at or now.time
    start = job.last_checkpoint_at or failed_at
    resumed_at = job.resumed_at or now.time
    restarted_at = job.restarted_at or resumed_at
    rework_s = (failed_at - start).total_seconds()
    downtime_s = max(0.0, (restarted_at - failed_at).total_seconds())
    restore_s = max(0.0, (resumed_at - restarted_at).total_seconds())
    recompute_s = max(0.0, (now.time - resumed_at).total_seconds()) if final else 0.0
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
                why="the failed checkpoint would have saved this work"), now.time,
                "impact", f"charge:{inc_id}:{akey(failed)}")
            severity.assess(d, ckpt_inc, now.time, "impact")
    if job.resumed_at is None:
        book.emit(inc_id, ev.RecoveryObserved(job=jobref(failed), stage="progress_resumed",
                                              resumed_at=now.time),
                  now.time, "recovery", f"resumed:{akey(failed)}")
    rework_s -= charge_s
    total_s = rework_s + downtime_s + restore_s + recompute_s
    book.emit(inc_id, ev.ImpactAssessed(
        job=jobref(failed), lost_gpu_hours=round(gpus * total_s / 3600, 6),
        lost_steps=lost_steps, rework_s=rework_s, downtime_s=downtime_s, restore_s=restore_s,
        recompute_s=recompute_s, charged_elsewhere_gpu_hours=round(gpus * charge_s / 3600, 6)),
        now.time, "impact", f"{'final' if final else 'assess'}:{akey(failed)}")
    severity.assess(d, inc_id, now.time, "impact")
