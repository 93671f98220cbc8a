"""The `job_attempts` projection: who ran where, when, with what, and why it waited.

State is per job (`JobRecord`) because one scheduler event can touch two attempts: a requeue
ends attempt N and opens attempt N+1, which inherits the submission's versions. The fold is
order-insensitive: each event contributes facts (a start time, an outcome, a pending reason)
and the attempt's state is derived from the facts, so a `job.started` that arrives after the
`job.failed` of the same attempt cannot resurrect it. Applying an event twice is a no-op.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime

from processors import gpus as gpu_count
from schemas.events import Event

LIFECYCLE_TYPES = frozenset({
    "job.submitted", "job.pending", "job.started", "job.requeued", "job.preempted",
    "job.completed", "job.failed", "job.cancelled", "job.timeout",
})

_OUTCOME = {
    "job.completed": "completed",
    "job.failed": "failed",
    "job.cancelled": "cancelled",
    "job.timeout": "timeout",
    "job.requeued": "requeued",
    "job.preempted": "preempted",
}
# When two terminal facts disagree (a preemption then the scheduler's requeue), the more
# specific one wins regardless of arrival order.
_OUTCOME_RANK = {"requeued": 1, "completed": 2, "cancelled": 2, "timeout": 3, "failed": 3,
                 "preempted": 4}


@dataclass(frozen=True)
class Attempt:
    project: str
    cluster: str
    job_id: str
    attempt: int
    outcome: str = ""
    user: str = ""
    queue: str = ""
    priority: int | None = None
    submitted_at: datetime | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    pending: tuple[tuple[datetime, str], ...] = ()
    exit_code: int | None = None
    end_reason: str = ""
    nodes: tuple[str, ...] = ()
    gpus: int = 0
    gpus_source: str = ""
    """What said `gpus` (`allocation:...`, `request:...`, `topology:...`; '' unknown):
    processors/gpus.py."""
    gpu_ids: tuple[str, ...] = ()
    ranks: tuple[tuple[str, str], ...] = ()
    image: str = ""
    code_version: str = ""
    data_version: str = ""
    config_hash: str = ""
    mounts: tuple[str, ...] = ()
    checkpoint_dir: str = ""
    requeued_at: datetime | None = None
    """When the scheduler requeued this attempt (the job stays queued with its request):
    without it, an attempt that ended holds no GPUs until the next one starts."""
    applied: frozenset[str] = field(default_factory=frozenset)

    @property
    def state(self) -> str:
        if self.outcome:
            return self.outcome
        return "running" if self.started_at is not None else "pending"

    @property
    def queue_wait_s(self) -> float | None:
        if self.submitted_at is None or self.started_at is None:
            return None
        return max(0.0, (self.started_at - self.submitted_at).total_seconds())

    @property
    def version(self) -> int:
        return len(self.applied)


@dataclass(frozen=True)
class JobRecord:
    project: str
    job_id: str
    attempts: dict[int, Attempt] = field(default_factory=dict)

    @property
    def applied(self) -> frozenset[str]:
        out: set[str] = set()
        for attempt in self.attempts.values():
            out |= attempt.applied
        return frozenset(out)

    def ended_before(self, cutoff: datetime) -> bool:
        """Every attempt ended, the last before `cutoff`: nothing more is expected of it."""
        ends = [a.ended_at for a in self.attempts.values()]
        return bool(ends) and all(e is not None and e < cutoff for e in ends)

    def attempt_at(self, time: datetime) -> int | None:
        """The attempt running at `time` (latest start not after it), for events without one."""
        best: Attempt | None = None
        for attempt in self.attempts.values():
            if attempt.started_at is not None and attempt.started_at <= time and (
                best is None or attempt.started_at >= (best.started_at or attempt.started_at)
            ):
                best = attempt
        return best.attempt if best else None


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


def _versions(attempt: Attempt, attrs: dict[str, object]) -> Attempt:
    """Image/code/data versions: an attempt's own start event beats the submission's."""
    updates: dict[str, object] = {}
    for key in ("image", "code_version", "data_version", "config_hash", "checkpoint_dir"):
        value = _str(attrs.get(key))
        if value:
            updates[key] = value
    mounts = attrs.get("mounts")
    if isinstance(mounts, list) and mounts:
        updates["mounts"] = tuple(str(m) for m in mounts)
    return replace(attempt, **updates) if updates else attempt  # type: ignore[arg-type]


def _counted(attempt: Attempt, event: Event) -> Attempt:
    """The GPU count the event states, when it is better than the attempt's."""
    found = gpu_count.said(event)
    if found is None or not gpu_count.better(found, (attempt.gpus, attempt.gpus_source)):
        return attempt
    return replace(attempt, gpus=found[0], gpus_source=found[1])


def _apply(attempt: Attempt, event: Event) -> Attempt:
    attrs = event.attributes
    kind = event.type
    if kind in ("job.submitted", "job.started"):
        attempt = _counted(attempt, event)
    if kind == "job.submitted":
        priority = attrs.get("priority")
        attempt = replace(
            attempt,
            submitted_at=min(filter(None, (attempt.submitted_at, event.time))),
            user=_str(attrs.get("user")) or attempt.user,
            queue=_str(attrs.get("queue")) or attempt.queue,
            priority=priority if isinstance(priority, int) else attempt.priority,
        )
        # the submission's versions fill gaps; an attempt's own start event keeps priority
        filled = _versions(Attempt(attempt.project, attempt.cluster, attempt.job_id, 0), attrs)
        return replace(
            attempt,
            image=attempt.image or filled.image,
            code_version=attempt.code_version or filled.code_version,
            data_version=attempt.data_version or filled.data_version,
            config_hash=attempt.config_hash or filled.config_hash,
            checkpoint_dir=attempt.checkpoint_dir or filled.checkpoint_dir,
            mounts=attempt.mounts or filled.mounts,
        )
    if kind == "job.pending":
        pending = tuple(sorted({*attempt.pending, (event.time, _str(attrs.get("reason")))}))
        return replace(attempt, pending=pending)
    if kind == "job.started":
        ranks = attrs.get("ranks") or {}
        attempt = replace(
            attempt,  # the earliest report of the start (squeue's is rounded down)
            started_at=event.time if attempt.started_at is None else min(attempt.started_at,
                                                                         event.time),
            nodes=tuple(attrs.get("nodes") or ()) or attempt.nodes,
            gpu_ids=tuple(attrs.get("gpu_ids") or ()) or attempt.gpu_ids,
            ranks=tuple(sorted((str(k), str(v)) for k, v in dict(ranks).items())) or attempt.ranks,
        )
        return _versions(attempt, attrs)
    outcome = _OUTCOME[kind]
    if kind == "job.requeued" or (kind == "job.preempted" and attrs.get("requeued") is True):
        attempt = replace(attempt, requeued_at=event.time if attempt.requeued_at is None
                          else min(attempt.requeued_at, event.time))
    if attempt.outcome and _OUTCOME_RANK[attempt.outcome] > _OUTCOME_RANK[outcome]:
        return attempt
    exit_code = attrs.get("exit_code")
    return replace(
        attempt,
        outcome=outcome,
        ended_at=event.time if attempt.ended_at is None else min(attempt.ended_at, event.time),
        exit_code=exit_code if isinstance(exit_code, int) else attempt.exit_code,
        end_reason=_str(attrs.get("reason")) or attempt.end_reason,
    )


def _blank(job: JobRecord, event: Event, number: int) -> Attempt:
    """A new attempt inherits what the job was submitted with (the first attempt's facts)."""
    first = job.attempts.get(min(job.attempts)) if job.attempts else None
    base = Attempt(job.project, event.cluster, job.job_id, number)
    if first is None:
        return base
    gpus, source = _inherited(job, number)
    return replace(
        base, user=first.user, queue=first.queue, priority=first.priority, gpus=gpus,
        gpus_source=source, image=first.image, code_version=first.code_version,
        data_version=first.data_version, config_hash=first.config_hash, mounts=first.mounts,
        checkpoint_dir=first.checkpoint_dir,
    )


def _inherited(job: JobRecord, number: int) -> gpu_count.Count:
    """The best count another attempt of the job has, as this attempt's request."""
    best: gpu_count.Count = (0, "")
    for other in sorted(job.attempts.values(), key=lambda a: a.attempt):
        if other.attempt != number and other.gpus > 0 and gpu_count.rank(
                other.gpus_source) >= gpu_count.KINDS["request"] and \
                not gpu_count.is_inherited(other.gpus_source):
            candidate = gpu_count.inherited((other.gpus, other.gpus_source), other.attempt)
            if gpu_count.better(candidate, best):
                best = candidate
    return best


def _shared(attempts: dict[int, Attempt], job: JobRecord, number: int) -> set[int]:
    """An attempt that got a count (an allocation, a request) gives it to the job's other
    attempts that have none better than the topology's: same job, same request. Returns
    the attempts it changed."""
    given = attempts[number]
    if given.gpus <= 0 or gpu_count.rank(given.gpus_source) < gpu_count.KINDS["request"] \
            or gpu_count.is_inherited(given.gpus_source):
        return set()
    offer = gpu_count.inherited((given.gpus, given.gpus_source), number)
    changed = set()
    for other, attempt in attempts.items():
        if other != number and gpu_count.rank(attempt.gpus_source) < gpu_count.KINDS[
                "request"] and gpu_count.better(offer, (attempt.gpus, attempt.gpus_source)):
            attempts[other] = replace(attempt, gpus=offer[0], gpus_source=offer[1])
            changed.add(other)
    return changed


def _number(job: JobRecord, event: Event) -> int:
    """The attempt of an event that names none: a start goes to the attempt a requeue opened
    (submitted, not started yet: a slurmctld `sched: Allocate` after a requeue is the new
    attempt); anything else to the attempt running at its time, else the first."""
    if event.type == "job.started":
        waiting = [a.attempt for a in job.attempts.values() if a.started_at is None
                   and a.submitted_at is not None and a.submitted_at <= event.time
                   and a.attempt > 1]
        if waiting:
            return min(waiting)
        running = job.attempts.get(job.attempt_at(event.time) or 0)
        if running is not None and running.ended_at is not None and \
                running.ended_at < event.time and running.outcome in _RESTARTED:
            # a start after the attempt ended (requeued, preempted, failed) and no requeue
            # line seen: the scheduler started it again, a new attempt
            return max(job.attempts) + 1
    return job.attempt_at(event.time) or 1


_RESTARTED = frozenset({"requeued", "preempted", "failed", "timeout"})


def evolve(job: JobRecord | None, event: Event) -> tuple[JobRecord | None, frozenset[int]]:
    """Fold one event into the job's record; returns the record and the attempts it changed."""
    if event.type not in LIFECYCLE_TYPES or not event.job_id:
        return job, frozenset()
    if job is None:
        job = JobRecord(event.project, event.job_id)
    if event.id in job.applied:
        return job, frozenset()
    # without an attempt number (a slurmctld requeue line) the event belongs to the attempt
    # running at its time, else the first
    number = event.attempt if event.attempt is not None else _number(job, event)
    attempts = dict(job.attempts)
    current = attempts.get(number) or _blank(job, event, number)
    attempts[number] = replace(_apply(current, event), applied=current.applied | {event.id})
    changed = {number} | _shared(attempts, job, number)
    if event.type == "job.requeued" or (event.type == "job.preempted"
                                        and event.attributes.get("requeued") is True):
        # a preemption that says it requeued the job (slurmctld's `preempted JobId=N has
        # been requeued`) opens the next attempt as a requeue does
        raw_next = event.attributes.get("next_attempt")
        nxt = raw_next if isinstance(raw_next, int) and raw_next > number else number + 1
        follower = attempts.get(nxt) or _blank(replace(job, attempts=attempts), event, nxt)
        submitted = follower.submitted_at
        attempts[nxt] = replace(
            follower,
            submitted_at=event.time if submitted is None else min(submitted, event.time),
            applied=follower.applied | {event.id},
        )
        changed.add(nxt)
    return replace(job, attempts=attempts), frozenset(changed)
