"""One line of GPU time per job: every stretch an attempt's GPUs were held (or not), what it
was spent on, and which failure it is charged to, each stretch once (DESIGN §9).

Each attempt has a track, from its start to its end (or the next attempt's start, or now),
followed by the wait until the next attempt. The track is cut into intervals:

    starting     the first attempt's start-up (or the start after a preemption): no
                 failure's cost
    restarting   start-up until the attempt's first step, after a failure: charged to the
                 latest failure before it (an attempt that failed before its first step
                 leaves the whole of its life to that failure's restart)
    productive   steps that were kept
    thrown_away  steps a failure threw away: from where the next attempt resumed to the
                 failure (a hang included); charged to that failure. Where the next
                 attempt fell back further (its restore failed, or its first step is below
                 the checkpoint), earlier kept steps become thrown away too, charged to the
                 same failure
    held         after the failure, the GPUs held until the attempt ended, and the wait
                 for the next attempt while the scheduler held the job's allocation
                 (pending `Resources`, no reason given); charged to the failure
    queued       the wait the scheduler queued the job behind other work, or after a
                 preemption: reported beside the loss, not counted
    not_held     an attempt that ended without a requeue holds nothing until the job is
                 resubmitted: time-to-train delay, reported beside the loss, not counted

The lost GPU-hours of a failure are the sum of its `thrown_away`, `restarting` and `held`
intervals, each times the GPUs of the track it lies on. Intervals of a track never overlap
and cover it exactly, so nothing is charged twice however many attempts fail.
Pure: no clock (`now` is the time of the event being decided), no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

COUNTED = frozenset({"thrown_away", "restarting", "held"})
REPORTED = frozenset({"queued", "not_held"})


@dataclass(frozen=True)
class Run:
    """An attempt as the line needs it (the caller folds it from the attempt's record, its
    progress and its incident)."""

    attempt: int
    gpus: int
    started_at: datetime
    ended_at: datetime | None = None
    submitted_at: datetime | None = None
    failed_at: datetime | None = None
    """The first failure symptom (None: the attempt did not fail, or not yet)."""
    first_step_at: datetime | None = None
    first_step: int | None = None
    checkpoints: tuple[tuple[int, datetime], ...] = ()
    """Good checkpoints (a save that finished) the attempt wrote: (step, time)."""
    started_saves: tuple[tuple[int, datetime], ...] = ()
    """Saves that started and never said they finished: a checkpoint only if an attempt
    later restores that step."""
    restored_step: int | None = None
    """The checkpoint the attempt loaded (a load that succeeded)."""
    restore_failed: bool = False
    requeued: bool = False
    preempted: bool = False
    pending: tuple[tuple[datetime, str], ...] = ()


@dataclass(frozen=True)
class Interval:
    track: int
    start: datetime
    end: datetime
    gpus: int
    kind: str
    charged: int | None = None

    @property
    def seconds(self) -> float:
        return max(0.0, (self.end - self.start).total_seconds())


@dataclass
class Charge:
    """What one failure is charged (seconds; GPU-hours counted once)."""

    rework_s: float = 0.0
    downtime_s: float = 0.0
    restore_s: float = 0.0
    queue_s: float = 0.0
    unheld_s: float = 0.0
    gpu_hours: float = 0.0
    resumed_step: int | None = None
    """Where the job resumed after this failure (the step the next run's progress says)."""
    intervals: list[Interval] = field(default_factory=list)


def _cut(intervals: list[Interval], start: datetime, end: datetime, track: int, gpus: int,
         kind: str, charged: int | None) -> None:
    if end > start:
        intervals.append(Interval(track, start, end, gpus, kind, charged))


def _resumed(run: Run, lineage: Sequence[Run]) -> int | None:
    """The step `run` resumed from: the checkpoint it loaded, unless its own first step is
    below it (it fell back further: then the newest checkpoint at or below that step, 0 when
    there is none). None when it says neither yet."""
    saved = sorted({s for r in lineage for s, _ in (*r.checkpoints, *r.started_saves)})
    restored = None if run.restore_failed and run.first_step is None else run.restored_step
    if run.first_step is not None and (restored is None or run.first_step < restored):
        below = [s for s in saved if s <= run.first_step]
        return below[-1] if below else 0
    return restored


def _reached(step: int, lineage: Sequence[Run]) -> tuple[int, datetime] | None:
    """(attempt, time) the lineage captured `step` last: a good checkpoint of that step, or
    a started save of it (a later attempt restored it, so it was written)."""
    found = [(t, r.attempt) for r in lineage for s, t in (*r.checkpoints, *r.started_saves)
             if s == step]
    if not found:
        return None
    when, attempt = max(found)
    return attempt, when


def _wait_kinds(after: datetime, until: datetime, run: Run, nxt: Run,
                queued: Callable[[str], bool]) -> list[tuple[datetime, datetime, str]]:
    """The wait from `after` (the attempt's end, or its failure when the end is unknown) to
    the next start: queued after a preemption; not held when the attempt ended without a
    requeue and the next one was submitted anew after it; else held until a pending reason
    the scheduler gave queues it behind other work."""
    if until <= after:
        return []
    if run.preempted:
        return [(after, until, "queued")]
    if run.ended_at is not None and not run.requeued and nxt.submitted_at is not None \
            and nxt.submitted_at >= run.ended_at:
        return [(after, until, "not_held")]
    out, since, kind = [], after, "held"
    for at, reason in sorted(m for m in run.pending if after < m[0] < until):
        out.append((since, at, kind))
        since, kind = at, "queued" if queued(reason) else "held"
    out.append((since, until, kind))
    return [o for o in out if o[1] > o[0]]


def line(runs: Sequence[Run], now: datetime,
         queued: Callable[[str], bool]) -> list[Interval]:
    """The job's GPU intervals up to `now`, from its attempts in the order they started;
    `queued(reason)` says whether a pending reason queued the job behind other work."""
    ordered = sorted((r for r in runs if r.started_at <= now),
                     key=lambda r: (r.started_at, r.attempt))
    out: list[Interval] = []
    previous: Run | None = None  # the latest failure whose restart is under way
    for i, run in enumerate(ordered):
        nxt = ordered[i + 1] if i + 1 < len(ordered) else None
        failed = run.failed_at if run.failed_at is not None and run.failed_at <= now else None
        # the track ends with the attempt; an attempt whose end is unknown, at its failure
        # (what follows is the wait), else at the next start, else now
        ends = run.ended_at if run.ended_at is not None else failed if failed is not None \
            else nxt.started_at if nxt is not None else now
        stop = max(min(ends, now), run.started_at)
        restart_of = previous.attempt if previous is not None and not previous.preempted \
            else None
        first_step = run.first_step_at if run.first_step_at is not None and \
            run.first_step_at <= now else None
        up_to = max(min(t for t in (first_step, failed, stop) if t is not None), run.started_at)
        if restart_of is not None:
            _cut(out, run.started_at, up_to, run.attempt, run.gpus, "restarting", restart_of)
            body = up_to
        elif failed is None:
            _cut(out, run.started_at, up_to, run.attempt, run.gpus, "starting", None)
            body = up_to
        else:  # a first attempt's start-up is thrown away with its work when it saved none
            body = run.started_at
        if failed is None:
            _cut(out, body, stop, run.attempt, run.gpus, "productive", None)
        else:
            lost_from = _lost_from(run, ordered[i + 1:], ordered[:i + 1], body, failed)
            _cut(out, body, lost_from, run.attempt, run.gpus, "productive", None)
            _cut(out, lost_from, failed, run.attempt, run.gpus, "thrown_away", run.attempt)
            _cut(out, failed, stop, run.attempt, run.gpus, "held", run.attempt)
            if nxt is not None:
                after = max(stop, failed)
                for a, b, kind in _wait_kinds(after, min(nxt.started_at, now), run, nxt,
                                              queued):
                    _cut(out, a, b, run.attempt, run.gpus, kind, run.attempt)
        previous = run if failed is not None else None
    return _fallbacks(out, ordered, now)


def _resumer(later: Sequence[Run]) -> Run | None:
    """The attempt the job resumed in after a failure: the first later one that logged a
    step (the immediate next while none has yet)."""
    return next((r for r in later if r.first_step is not None), later[0] if later else None)


def _lost_from(run: Run, later: Sequence[Run], lineage: Sequence[Run], body: datetime,
               failed: datetime) -> datetime:
    """Where the failed attempt's thrown-away work starts: the checkpoint the job resumed
    from when it is this attempt's, else its last good checkpoint (the one the next attempt
    is expected to load), else the start of its work (an attempt after a failure: its first
    step; its start-up is that failure's restart)."""
    resumer = _resumer(later)
    resumed = _resumed(resumer, lineage) if resumer is not None else None
    own = [t for s, t in run.checkpoints if t <= failed and (resumed is None or s <= resumed)]
    if resumed is not None:
        own += [t for s, t in run.started_saves if s == resumed and t <= failed]
    return max(max(own), body) if own else body


def _fallbacks(intervals: list[Interval], ordered: Sequence[Run],
               now: datetime) -> list[Interval]:
    """Kept steps a later attempt did not resume from (it fell back to an older checkpoint)
    are thrown away too, charged to the failure the job was recovering from."""
    for i, run in enumerate(ordered):
        if run.failed_at is None or run.failed_at > now:
            continue
        resumer = next((r for r in ordered[i + 1:] if r.first_step is not None), None)
        if resumer is None:
            continue
        step = _resumed(resumer, ordered[:i + 1])
        where = _reached(step, ordered[:i + 1]) if step is not None else None
        if where is None and step != 0:
            continue  # resumed from a step the line never saw saved: no further than the
            # failed attempt's own work (its start) is known to be lost
        since = where[1] if where else ordered[0].started_at
        out: list[Interval] = []
        for iv in intervals:
            if iv.kind != "productive" or iv.end <= since or iv.start >= run.failed_at or \
                    iv.track > run.attempt:
                out.append(iv)
                continue
            cut = max(iv.start, since)
            if cut > iv.start:
                out.append(Interval(iv.track, iv.start, cut, iv.gpus, "productive"))
            out.append(Interval(iv.track, cut, iv.end, iv.gpus, "thrown_away", run.attempt))
        intervals = out
    return sorted(intervals, key=lambda iv: (iv.track, iv.start))


def charges(runs: Sequence[Run], now: datetime,
            queued: Callable[[str], bool]) -> dict[int, Charge]:
    """Per failed attempt, what the line charges it."""
    out: dict[int, Charge] = {r.attempt: Charge() for r in runs
                              if r.failed_at is not None and r.failed_at <= now}
    ordered = sorted(runs, key=lambda r: (r.started_at, r.attempt))
    for i, run in enumerate(ordered):
        if run.attempt in out:
            resumer = next((r for r in ordered[i + 1:] if r.first_step is not None), None)
            if resumer is not None:
                out[run.attempt].resumed_step = _resumed(resumer, ordered[:i + 1])
    for iv in line(runs, now, queued):
        charge = out.get(iv.charged) if iv.charged is not None else None
        if charge is None:
            continue
        charge.intervals.append(iv)
        if iv.kind == "thrown_away":
            charge.rework_s += iv.seconds
        elif iv.kind == "held":
            charge.downtime_s += iv.seconds
        elif iv.kind == "restarting":
            charge.restore_s += iv.seconds
        elif iv.kind == "queued":
            charge.queue_s += iv.seconds
        elif iv.kind == "not_held":
            charge.unheld_s += iv.seconds
        if iv.kind in COUNTED:
            charge.gpu_hours += iv.gpus * iv.seconds / 3600
    return out
