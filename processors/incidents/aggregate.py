"""The incident's current state: what `evolve.apply` folds the log into (DESIGN §6), with
the impact of each attempt, the evidence and the follow-up actions."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from processors.postmortem.state import Postmortem


@dataclass(frozen=True)
class JobImpact:
    project: str
    job_id: str
    attempt: int
    gpus: int = 0
    gpus_source: str = ""
    """What said `gpus` (`allocation:...`, `request:...`, `topology:...`): processors/gpus."""
    started_at: datetime | None = None
    failed_at: datetime | None = None
    failure_step: int | None = None
    failure_step_source: str = ""  # job.failed / job.worker_exited (reported), progress
    last_checkpoint_step: int | None = None
    last_checkpoint_at: datetime | None = None
    degraded_since: datetime | None = None
    restarted_attempt: int | None = None
    restarted_job: str | None = None
    """The job `restarted_attempt` is of when not this one (resubmitted under a new id)."""
    restarted_at: datetime | None = None
    restored_step: int | None = None
    resumed_at: datetime | None = None
    verified_at: datetime | None = None
    lost_gpu_hours: float = 0.0
    lost_steps: int = 0
    rework_s: float = 0.0
    downtime_s: float = 0.0
    """The wait between the failure and the new attempt while the job's GPUs were held."""
    restore_s: float = 0.0
    queue_s: float = 0.0
    """The rest of that wait (queued behind other work, after a preemption): not counted."""
    unheld_s: float = 0.0
    """The wait the job held no GPUs (it ended without a requeue, until resubmitted): the
    time-to-train delay, not counted."""
    setback_s: float = 0.0
    """Wall clock: progress passed the failure step again - when it first reached it."""
    failure_step_at: datetime | None = None
    degraded_s: float = 0.0
    duplicate_run: bool = False
    role: str = "failed"  # failed (the attempt died), degraded (a failed checkpoint, a
    # slow-down), linked (a standing incident's reference)

    @property
    def key(self) -> str:
        return f"{self.project}/{self.job_id}/{self.attempt}"

    @property
    def loss_unknown(self) -> str:
        """Why this attempt's lost GPU-hours are unknown ('' when they are known): a failed
        attempt no source gave a GPU count. Its phases (rework, downtime, restore) are
        still measured; only the GPU count to multiply them by is missing."""
        if self.role != "failed" or self.gpus > 0:
            return ""
        from processors.gpus import UNKNOWN

        return UNKNOWN

    @property
    def recovery(self) -> str:
        if self.verified_at is not None:
            return "verified"
        if self.resumed_at is not None:
            return "progress_resumed"
        if self.restored_step is not None:
            return "restored"
        if self.restarted_attempt is not None:
            return "restarted"
        return "awaiting_restart"


@dataclass(frozen=True)
class Evidence:
    event_id: str
    time: datetime
    type: str
    source: str
    entity: str
    why: str
    role: str  # cause, symptom, signal, recovery, consequence, straggler
    project: str = ""
    job_id: str = ""
    attempt: int | None = None


@dataclass(frozen=True)
class Action:
    action_id: str
    title: str
    owner: str = ""
    status: str = "open"
    due: str = ""
    projects: tuple[str, ...] = ()
    """The projects of whoever added it (shown to those projects); () for operators."""
    kind: str = ""
    priority: str = ""
    tracker: str = ""
    reason: str = ""
    why: str = ""
    rule: str = ""
    """Set for a proposal: the remediation rule that proposed it."""


@dataclass(frozen=True)
class Told:
    """One thing people did or said, for the postmortem's human story: when it happened
    (`at`, corrected if someone corrected it) and when it was recorded."""

    event_id: str
    kind: str
    at: datetime
    recorded: datetime
    by: str
    text: str = ""
    corrected: bool = False


def still_drained(evidence: Iterable[tuple[datetime, str, str, str]]
                  ) -> list[tuple[str, datetime]]:
    """(node, drained since) of the nodes an incident's evidence shows drained and not yet
    back (`node.ready` after the drain), from (time, type, entity, role) of each piece: what
    `incident show` lists as still out of service."""
    out: dict[str, datetime] = {}
    for time, type_, entity, role in sorted(evidence):
        node = entity.split("/", 1)[0]
        if role == "moved" or not node:
            continue
        if type_ == "node.drained":
            out.setdefault(node, time)
        elif type_ == "node.ready":
            out.pop(node, None)
    return sorted(out.items())


RECOVERY_STAGES = ("awaiting_restart", "restarted", "restored", "progress_resumed", "verified")


def recovery_of(jobs: Iterable[JobImpact]) -> str:
    """The least advanced recovery of the failed attempts among `jobs` ('' when none)."""
    states = {j.recovery for j in jobs if j.role == "failed"}
    return min(states, key=RECOVERY_STAGES.index) if states else ""


@dataclass
class Incident:
    """The current state. `apply` folds events into it in place (collections included):
    incidents collect hundreds of evidence events, and copying them per event made the fold
    quadratic. Callers keep only the state `apply` returns."""

    id: str
    key: str = ""
    cluster: str = ""
    """The cluster it happened in: two clusters' node-001 are two entities."""
    seq: int = 0
    status: str = "open"
    title: str = ""
    klass: str = "unknown"
    entity: str = ""
    rule: str = ""
    cause_class: str = ""
    cause_entity: str = ""
    cause_event: str = ""
    cause_source: str = ""  # signal (the entity's own), infrastructure (linked to a job), job
    cause_rank: int | None = None
    cause_at: datetime | None = None
    confidence: float = 0.0
    explanation: str = ""
    severity: str = "sev4"
    severity_why: str = ""
    owner: str = ""
    owner_rule: str = ""
    owner_why: str = ""
    commander: str = ""
    opened_at: datetime | None = None
    acknowledged_at: datetime | None = None
    mitigated_at: datetime | None = None
    resolved_at: datetime | None = None
    closed_at: datetime | None = None
    first_signal_at: datetime | None = None
    last_signal_at: datetime | None = None
    signals: int = 0
    ended: dict[str, datetime] = field(default_factory=dict)
    """signal event id -> when its condition ended (an alert's resolution)"""
    evidence: dict[str, Evidence] = field(default_factory=dict)
    jobs: dict[str, JobImpact] = field(default_factory=dict)
    actions: dict[str, Action] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    charged_gpu_hours: float = 0.0  # loss charged here by other incidents (checkpoints)
    linked: tuple[str, ...] = ()  # incidents a standing incident links
    merged_into: str = ""  # late evidence put this incident's attempts in that one
    moved: tuple[tuple[str, str, int], ...] = ()
    """(project, job id, attempt) a revision took out of the incident: the projection writes
    them as `moved` rows, so the store does not keep an old row (and its loss) beside the
    incident that now holds the attempt."""
    dropped: dict[str, Evidence] = field(default_factory=dict)
    """Evidence a revision took out (late evidence changed the diagnosis): the projection
    writes it as `moved` rows, so the store does not keep evidence the incident no longer
    stands on."""
    withdrawn: bool = False  # in time order the events do not give this incident
    pm: Postmortem = field(default_factory=Postmortem)
    story: dict[str, Told] = field(default_factory=dict)
    """event id -> what people did, in log order (`TimeCorrected` moves its `at`)."""
    stamps: dict[str, str] = field(default_factory=dict)
    """lifecycle stamp (acknowledged_at, ...) -> the event that set it (for corrections)."""
    people: set[str] = field(default_factory=set)  # the persons in the log (blameless check)
    flags: set[str] = field(default_factory=set)  # repeat, no_restart, duplicate_run, ...
    commands: set[str] = field(default_factory=set)
    applied: set[str] = field(default_factory=set)

    @property
    def lost_gpu_hours(self) -> float:
        return round(sum(j.lost_gpu_hours for j in self.jobs.values())
                     + self.charged_gpu_hours, 6)

    @property
    def loss_unknown(self) -> str:
        """Why the incident's lost GPU-hours are unknown or only a lower bound ('' when
        every failed attempt's GPU count is known): `lost_gpu_hours` then counts only the
        attempts whose GPUs are known, and is never to be shown as a loss of 0."""
        unknown = sorted(j.key for j in self.jobs.values() if j.loss_unknown)
        if not unknown:
            return ""
        from processors.gpus import UNKNOWN

        counted = self.lost_gpu_hours
        rest = f"; {counted:g} GPU-hours counted for the others" if counted else ""
        return f"GPUs unknown for {', '.join(unknown)}: {UNKNOWN}{rest}"

    @property
    def lost_steps(self) -> int:
        return sum(j.lost_steps for j in self.jobs.values())

    @property
    def gpus(self) -> int:
        return sum(j.gpus for j in self.jobs.values())

    @property
    def recovery(self) -> str:
        return recovery_of(self.jobs.values())

    @property
    def projects(self) -> list[str]:
        return sorted({j.project for j in self.jobs.values()})

    @property
    def active(self) -> bool:
        return self.status not in ("resolved", "closed")

    @property
    def still_drained(self) -> list[tuple[str, datetime]]:
        """Nodes its evidence shows drained and not back in service, with since when."""
        return still_drained((e.time, e.type, e.entity, e.role) for e in self.evidence.values())

    @property
    def job_scoped(self) -> bool:
        """An incident of one attempt's own (its key is the attempt), not an entity's."""
        return self.key.startswith("job:")

