"""Failures correlated across jobs: when an entity's incident gains a failing attempt, the
other attempts its signals reached in the window are weighed again (`weighing`), now that
the entity explains more of them. An attempt whose strongest candidate is now this entity
moves into its incident; the incident it leaves is withdrawn into this one when it held
nothing else (a counter tick on one job's leaf that looked like the cause until the
metadata server's stall broke two more jobs), or revised without it. One story, one
incident, whatever order the jobs failed in.

Stalls that never failed count as impact: a checkpoint save that took `STALL_RATIO` times
the attempt's usual save, while an entity that reached the attempt had an incident open,
puts the attempt in that incident as degraded (the metadata server that failed one job,
broke another's checkpoint and stalled a third's save for 9 minutes is one incident with
three jobs).

Across attempts: a job whose last `repeat_offender_count` failed attempts moved between node
sets but kept some nodes in common (each failure with its own symptom: a segfault, an NCCL
error, an MMU fault) makes those nodes suspects; each failure counts against them towards the
repeat-offender verdict (`offenders`), the same as failures grouped on the node.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from statistics import median
from typing import TYPE_CHECKING

from processors.incidents import impact, offenders, weighing
from processors.incidents.aggregate import JobImpact
from processors.incidents.book import AttemptKey, Progress, akey, jobref
from processors.incidents.revision import revision
from schemas import incident_events as ev
from schemas.events import Event

if TYPE_CHECKING:
    from processors.incidents.context import Context

RULE = "correlate"
STALL_RATIO = 10.0
"""A save this many times the attempt's usual one (its median) is a stall."""


def regroup(ctx: Context, inc_id: str, time: datetime) -> None:
    book = ctx.book
    inc = book.incidents[inc_id]
    if inc.job_scoped or not inc.key or not inc.active:
        return
    reached = sorted({a for s in book.signals if s.key == inc.key for a in s.reached})
    for attempt in reached:
        other_id = book.by_attempt.get(attempt)
        if other_id is None or other_id == inc_id:
            continue
        other = book.incidents[other_id]
        job = other.jobs.get(akey(attempt))
        if not other.active or job is None or job.role != "failed" or job.failed_at is None:
            continue
        if other.cause_source == "job" and (other.cause_rank or 0) >= weighing.OWN_RANK:
            continue  # the job's own message named it
        ranked = weighing.candidates(ctx, attempt, job.failed_at)
        if not ranked or ranked[0].signal.key != inc.key or ranked[0].signal.key == other.key:
            continue
        move(ctx, attempt, other_id, inc_id, job.failed_at, ranked)
    for attempt in reached:
        progress = book.progress.get(attempt)
        for start, end, event_id in progress.stalls if progress else ():
            _stalled(ctx, attempt, start, end, event_id)


def move(ctx: Context, attempt: AttemptKey, from_id: str, to_id: str, failed_at: datetime,
         ranked: list[weighing.Candidate]) -> None:
    book = ctx.book
    best = ranked[0]
    was = book.incidents[from_id]
    why = (f"{akey(attempt)} moves to {to_id}: {best.describe()} now explains it better than "
           f"{was.cause_entity or was.entity} ({was.klass})")
    pending = book.pending.get((attempt[0], attempt[1]), [])
    if (from_id, attempt) in pending:
        pending.remove((from_id, attempt))
    book.by_attempt.pop(attempt, None)
    impact.impacted(ctx, to_id, attempt, failed_at, RULE, role="failed")
    carry(ctx, to_id, attempt, was.jobs.get(akey(attempt)), failed_at)
    book.evidence(to_id, best.signal.event, "cause", why, RULE, attempt)
    to = book.incidents[to_id]
    book.emit(to_id, ev.CauseUpdated(
        klass=to.cause_class or to.klass, entity=to.cause_entity or to.entity,
        event_id=to.cause_event, confidence=to.confidence, source=to.cause_source,
        rank=to.cause_rank, explanation=f"{to.explanation} It also explains the failure of "
        f"{akey(attempt)} at {failed_at.isoformat()}.{weighing.losers(ranked, best)}"),
        failed_at, RULE, f"explains:{akey(attempt)}")
    held = [k for k, j in was.jobs.items() if j.role in ("failed", "degraded")]
    if held == [akey(attempt)]:
        payload = ev.DiagnosisRevised(why=why, merged_into=to_id)
        for key in [k for k, v in book.open.items() if v == from_id]:
            del book.open[key]
    else:
        payload = revision(was, why)
        payload = payload.model_copy(update={
            "jobs": [j for j in payload.jobs
                     if (j["project"], j["job_id"], j["attempt"]) != attempt]})
    book.emit(from_id, payload, failed_at, RULE, f"moved:{akey(attempt)}:{to_id}")


def carry(ctx: Context, to_id: str, attempt: AttemptKey, old: JobImpact | None,
          when: datetime) -> None:
    """The recovery the attempt had made in the incident it leaves (restarted, restored,
    progress resumed, verified: the job's log imported before the file with the cause),
    recorded again in the one it joins, and its loss assessed there."""
    if old is None or old.recovery == "awaiting_restart":
        return
    book, ref, name = ctx.book, jobref(attempt), akey(attempt)
    if old.restarted_attempt is not None:
        book.emit(to_id, ev.RecoveryObserved(
            job=ref, stage="restarted", restarted_attempt=old.restarted_attempt,
            restarted_at=old.restarted_at, duplicate_run=old.duplicate_run),
            old.restarted_at or when, RULE, f"restarted:{name}:{old.restarted_attempt}")
    if old.restored_step is not None:
        book.emit(to_id, ev.RecoveryObserved(job=ref, stage="restored",
                                             restored_step=old.restored_step,
                                             by_attempt=old.restarted_attempt),
                  old.resumed_at or old.restarted_at or when, RULE,
                  f"restored:{name}:{old.restarted_attempt}")
    if old.resumed_at is None:
        return
    gpus = book.incidents[to_id].jobs[name].gpus
    impact.assess(ctx, to_id, attempt, gpus, old.resumed_at, final=False)
    if old.verified_at is not None:
        impact.assess(ctx, to_id, attempt, gpus, old.verified_at, final=True)
        job = book.incidents[to_id].jobs[name]
        book.emit(to_id, ev.RecoveryVerified(job=ref, verified_at=old.verified_at,
                                             past=job.failure_step),
                  old.verified_at, RULE, f"verified:{name}")
        waiting = book.pending.get((attempt[0], attempt[1]), [])
        if (to_id, attempt) in waiting and old.restarted_attempt is not None:
            waiting.remove((to_id, attempt))  # else its restart, still to come, is recorded


def shared_nodes(ctx: Context, inc_id: str, key: AttemptKey, time: datetime) -> None:
    """The failed attempt `key` and the job's earlier failed attempts: the nodes they all
    ran on, when they did not all run on the same ones, count each failure."""
    book, count = ctx.book, ctx.rules.repeat_offender_count
    job = book.jobs.get((key[0], key[1]))
    if job is None or count < 2:
        return
    inc = book.incidents[inc_id]
    if inc.key.startswith("node:") and inc.cause_source == "infrastructure":
        return  # its node explains the failure: the others it shared are not suspects
    horizon = time.timestamp() - ctx.rules.repeat_offender_window_s
    failed = [a for n, a in sorted(job.attempts.items()) if n < key[2] and a.nodes
              and a.outcome in ("failed", "requeued") and a.ended_at is not None
              and a.ended_at.timestamp() >= horizon][-(count - 1):]
    current = job.attempts.get(key[2])
    if current is None or not current.nodes or len(failed) < count - 1:
        return
    sets = [set(a.nodes) for a in failed] + [set(current.nodes)]
    common = set.intersection(*sets)
    if not common or all(s == sets[0] for s in sets):
        return  # nothing shared, or nowhere else to compare with
    for node in sorted(common):
        for attempt in [*failed, current]:
            ref = (attempt.project, attempt.job_id, attempt.attempt)
            held = inc_id if ref == key else book.by_attempt.get(ref) or \
                _held(ctx, ref) or inc_id
            offenders.failure(ctx, node, held, akey(ref), time)


def _held(ctx: Context, ref: AttemptKey) -> str:
    """The incident that holds a failed attempt, resolved or not."""
    return next((i for i, inc in ctx.book.incidents.items()
                 if akey(ref) in inc.jobs and inc.jobs[akey(ref)].role == "failed"), "")


def saved(ctx: Context, event: Event, key: AttemptKey, progress: Progress) -> None:
    """A checkpoint save: a stall when it took `STALL_RATIO` x the usual."""
    duration = event.attributes.get("duration_s")
    if not isinstance(duration, int | float) or isinstance(duration, bool) or duration <= 0:
        return
    usual = median(progress.saves) if progress.saves else None
    progress.saves.append(float(duration))
    if usual is None or duration < STALL_RATIO * usual:
        return
    start = event.time - timedelta(seconds=float(duration))
    progress.stalls = [*progress.stalls[-7:], (start, event.time, event.id)]
    _stalled(ctx, key, start, event.time, event.id)


def _stalled(ctx: Context, key: AttemptKey, start: datetime, end: datetime,
             event_id: str) -> None:
    """The open entity incident whose signals reached the stalled attempt around the stall
    takes it as degraded."""
    book = ctx.book
    for candidate in weighing.candidates(ctx, key, end, start - timedelta(
            seconds=ctx.rules.cause_window_s)):
        inc_id = book.open.get(candidate.signal.key)
        if inc_id is None or book.incidents[inc_id].job_scoped:
            continue
        if akey(key) in book.incidents[inc_id].jobs:
            return
        minutes = (end - start).total_seconds() / 60
        impact.impacted(ctx, inc_id, key, end, RULE, role="degraded")
        book.emit(inc_id, ev.SignalAdded(detail=f"stall: {akey(key)}'s checkpoint save took "
                                                f"{minutes:.0f} min, {candidate.describe()}"),
                  end, RULE, f"stall:{event_id}")
        return
