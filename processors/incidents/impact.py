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
             role: str) -> None:
    """The attempt joins the incident: `failed` (it died: recovery is followed, the loss is
    counted when progress resumes) or `degraded` (it went on, worse off)."""
    book = d.book
    inc = book.incidents[inc_id]
    if akey(key) in inc.jobs:
        return
    attempt = book.attempt(key)
    progress = book.progress.get(key, Progress())
    gpus = (attempt.gpus or len(attempt.gpu_ids)) if attempt else 0
    if role == "failed":
        ckpt_at = progress.ckpt_at or (attempt.started_at if attempt else None)
        payload = ev.JobImpacted(job=jobref(key), gpus=gpus, role=role, failed_at=time,
                                 failure_step=progress.last_step,
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
    if inc.key.startswith("node:"):
        standing = book.open.get(f"lemon:{inc.key[5:]}")
        if standing is not None:
            book.emit(standing, ev.JobImpacted(job=jobref(key), gpus=gpus, role="linked"),
                      time, "repeat-offender", f"{inc_id}:{akey(key)}")


def assess(d: Detector, inc_id: str, failed: AttemptKey, gpus: int, resumed: Event) -> None:
    """Lost GPU-hours = GPUs x (failure - last good checkpoint + failure -> resumed); a
    failed checkpoint in between is charged to its own incident."""
    book = d.book
    impact = book.incidents[inc_id].jobs[akey(failed)]
    start = impact.last_checkpoint_at
    failed_at = impact.failed_at or resumed.time
    if start is None:
        start = failed_at
    rework_s = (failed_at - start).total_seconds()
    downtime_s = (resumed.time - failed_at).total_seconds()
    restored = impact.restored_step if impact.restored_step is not None else \
        impact.last_checkpoint_step
    lost_steps = max(0, (impact.failure_step or 0) - (restored or 0)) \
        if impact.failure_step is not None else 0
    charge_s = 0.0
    progress = book.progress.get(failed)
    if progress and progress.failed_ckpt and progress.failed_ckpt[1] != inc_id:
        failed_ckpt_at, ckpt_inc = progress.failed_ckpt
        if start <= failed_ckpt_at <= failed_at:
            charge_s = (failed_ckpt_at - start).total_seconds()
            book.emit(ckpt_inc, ev.ImpactAssessed(
                charged_gpu_hours=round(gpus * charge_s / 3600, 6), from_incident=inc_id,
                job=jobref(failed), role="degraded",
                why="the failed checkpoint would have saved this work"), resumed.time,
                "impact", f"charge:{inc_id}:{akey(failed)}")
            severity.assess(d, ckpt_inc, resumed.time, "impact")
    lost = round(gpus * (rework_s + downtime_s - charge_s) / 3600, 6)
    book.emit(inc_id, ev.RecoveryObserved(job=jobref(failed), stage="progress_resumed",
                                          resumed_at=resumed.time),
              resumed.time, "recovery", f"resumed:{akey(failed)}")
    book.emit(inc_id, ev.ImpactAssessed(
        job=jobref(failed), lost_gpu_hours=lost, lost_steps=lost_steps,
        rework_s=rework_s - charge_s, downtime_s=downtime_s,
        charged_elsewhere_gpu_hours=round(gpus * charge_s / 3600, 6)),
        resumed.time, "impact", f"assess:{akey(failed)}")
    severity.assess(d, inc_id, resumed.time, "impact")
