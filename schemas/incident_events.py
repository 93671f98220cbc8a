"""The incident events: frozen, past-tense payloads, one class per kind (DESIGN §6).

On the wire and in `incident_log` an incident event is an envelope (`IncidentEvent`: id,
incident, seq, kind, time, actor) around its payload as a JSON object (`data`). These classes
are the payloads: processors build them, the fold reads them. Each carries `schema_version`;
when a payload changes shape, bump it and register an upcaster beside the class
(`UPCASTERS[(kind, old_version)]`), so stored history keeps folding. Unknown extra keys are
kept (a newer writer's fields survive an older reader).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from pydantic import Field

from schemas.incident_payload import Actor, JobRef, Payload
from schemas.postmortem_events import (
    ActionAdded,
    ActionProposed,
    ActionUpdated,
    LearningRecorded,
    PostmortemAmended,
    PostmortemApproved,
    PostmortemChangesRequested,
    PostmortemDrafted,
    PostmortemPublished,
    PostmortemReviewRequested,
    PostmortemSectionEdited,
    PostmortemWaived,
    _drafted_v1,
    _published_v1,
)

__all__ = [
    "PAYLOADS",
    "UPCASTERS",
    "Acknowledged",
    "ActionAdded",
    "ActionProposed",
    "ActionUpdated",
    "Actor",
    "CauseUpdated",
    "Closed",
    "CommanderAssigned",
    "DiagnosisRevised",
    "EvidenceAttached",
    "FailureStepUpdated",
    "GpusRevised",
    "ImpactAssessed",
    "IncidentOpened",
    "JobImpacted",
    "JobRef",
    "LearningRecorded",
    "Mitigated",
    "NoteAdded",
    "OwnerAssigned",
    "Paged",
    "Payload",
    "PostmortemAmended",
    "PostmortemApproved",
    "PostmortemChangesRequested",
    "PostmortemDrafted",
    "PostmortemPublished",
    "PostmortemReviewRequested",
    "PostmortemSectionEdited",
    "PostmortemWaived",
    "RecoveryObserved",
    "RecoveryVerified",
    "Reopened",
    "Resolved",
    "SeverityChanged",
    "SignalAdded",
    "SignalEnded",
    "TimeCorrected",
    "parse",
]


class IncidentOpened(Payload):
    KIND = "opened"
    key: str
    klass: str = Field(alias="class")
    entity: str
    title: str = ""
    first_signal_at: datetime | None = None
    first_event: str = ""
    cluster: str = ""
    """The cluster whose events opened it (entity names are unique only within one)."""


class SignalAdded(Payload):
    """Another signal on the incident's key, a flag (repeat, no_restart, duplicate_run,
    consequence), or a standing incident's link to one it groups."""

    KIND = "signal_added"
    event_id: str = ""
    rule: str = ""
    flag: str = ""
    detail: str = ""
    linked: str = ""
    count: int = Field(default=1, ge=1)
    """Signals this event stands for: more than one once an incident holds
    `max_signal_evidence` of them (the ones folded in since the last, and this one)."""


class SignalEnded(Payload):
    """The condition a signal reported is over: an alert's resolution (`event_id`) ends the
    firing signal `ends`, which stays one signal with a start and an end."""

    KIND = "signal_ended"
    event_id: str
    ends: str
    started_at: datetime | None = None
    ended_at: datetime | None = None


class EvidenceAttached(Payload):
    KIND = "evidence_attached"
    event_id: str
    time: datetime
    type: str = ""
    source: str = ""
    entity: str = ""
    why: str = ""
    role: str = "signal"  # cause, symptom, signal, recovery, consequence, straggler
    project: str = ""
    job_id: str = ""
    attempt: int | None = None


class JobImpacted(Payload):
    KIND = "job_impacted"
    job: JobRef
    gpus: int = 0
    gpus_source: str = ""
    """What said the GPU count (processors/gpus.py); '' with 0 GPUs: unknown, so is the loss."""
    role: str = "failed"  # failed, degraded, linked
    started_at: datetime | None = None
    failed_at: datetime | None = None
    failure_step: int | None = None
    failure_step_source: str = ""
    last_checkpoint_step: int | None = None
    last_checkpoint_at: datetime | None = None
    degraded_since: datetime | None = None
    failure_step_at: datetime | None = None
    """When progress first reached the failure step (the setback is measured from it)."""


class GpusRevised(Payload):
    """A better source said the attempt's GPUs (an allocation after a request, a count
    after none): the impact holds the new count, and the loss is assessed again."""

    KIND = "gpus_revised"
    job: JobRef
    gpus: int
    gpus_source: str = ""
    previous: int = 0
    previous_source: str = ""


class FailureStepUpdated(Payload):
    """Better evidence of where a failed attempt stopped: the `step` its failure reported
    (authoritative), or a progress report that arrived after the first symptom."""

    KIND = "failure_step_updated"
    job: JobRef
    failure_step: int
    failure_step_source: str = ""  # "job.failed", "job.worker_exited", "progress"
    event_id: str = ""
    failure_step_at: datetime | None = None


class CauseUpdated(Payload):
    KIND = "cause_updated"
    klass: str = Field(alias="class")
    entity: str
    event_id: str = ""
    confidence: float = 0.0
    explanation: str = ""
    relation: str = ""
    source: str = ""  # signal (the entity's own), infrastructure (linked to a job), job
    rank: int | None = None


class SeverityChanged(Payload):
    KIND = "severity_changed"
    severity: str
    why: str = ""


class OwnerAssigned(Payload):
    KIND = "owner_assigned"
    team: str
    rule: str = ""
    why: str = ""


class Acknowledged(Payload):
    KIND = "acknowledged"


class CommanderAssigned(Payload):
    KIND = "commander_assigned"
    person: str


class NoteAdded(Payload):
    KIND = "note_added"
    text: str = ""
    projects: list[str] = Field(default_factory=list)


class Mitigated(Payload):
    KIND = "mitigated"
    text: str = ""
    """What was done to stop the impact (optional: the Resolution section shows it)."""


class Paged(Payload):
    """Someone was paged or called in (by a person, or by a notification rule)."""

    KIND = "paged"
    who: str = Field(min_length=1, max_length=200)
    why: str = ""


class TimeCorrected(Payload):
    """A recorded time was wrong: the event `event_id` (one of this incident's) happened
    at `at`. The original stays in the log; the fold reads the correction."""

    KIND = "time_corrected"
    event_id: str = Field(min_length=1)
    why: str = ""


class RecoveryObserved(Payload):
    """A stage of a failed attempt's recovery: restarted, restored, progress_resumed."""

    KIND = "recovery_observed"
    job: JobRef
    stage: str
    restarted_attempt: int | None = None
    restarted_job: str | None = None
    """The job the restart ran under when it is not the failed one's: resubmitted under a
    new id, it restored the failed job's checkpoint (`processors/incidents/continuation`)."""
    restarted_at: datetime | None = None
    duplicate_run: bool | None = None
    restored_step: int | None = None
    by_attempt: int | None = None
    resumed_at: datetime | None = None


class RecoveryVerified(Payload):
    KIND = "recovery_verified"
    job: JobRef
    verified_at: datetime
    step: int | None = None
    past: int | None = None


class ImpactAssessed(Payload):
    """A failed attempt's loss, split by phase (docs/incidents.md has the formula), or loss
    charged to this incident from another one (`charged_gpu_hours`).

    v2 counts GPU time once: rework + the wait while the job's GPUs were held
    (`downtime_s`) + restore; the wait in the queue (`queue_s`) and the job's wall-clock
    `setback_s` are reported beside it, not counted. v1 also counted the re-done steps
    (`recompute_s`) a second time; its upcaster takes them out."""

    KIND = "impact_assessed"
    VERSION = 2
    schema_version: int = 2
    job: JobRef | None = None
    lost_gpu_hours: float | None = None
    lost_steps: int | None = None
    rework_s: float | None = None
    downtime_s: float | None = None
    restore_s: float | None = None
    queue_s: float | None = None
    unheld_s: float | None = None
    """The wait the job held no GPUs (it ended without a requeue, until resubmitted): the
    time-to-train delay, reported beside the loss."""
    setback_s: float | None = None
    degraded_s: float | None = None
    charged_elsewhere_gpu_hours: float | None = None
    charged_gpu_hours: float | None = None
    from_incident: str = ""
    role: str = ""
    why: str = ""


class DiagnosisRevised(Payload):
    """Late evidence changed the answer: the detector's conclusion as the events give it in
    time order (processors/incidents/lateness.py). Replaces what the detector concluded
    (cause, class and entity, owner, severity, impacted attempts and their loss, evidence);
    what people did (acknowledgement, notes, actions, a manual owner) stays. `merged_into`:
    in time order this incident's attempts belong to that one; it is closed."""

    KIND = "diagnosis_revised"
    why: str = ""
    merged_into: str = ""
    key: str = ""
    klass: str = Field(default="", alias="class")
    entity: str = ""
    title: str = ""
    cause_class: str = ""
    cause_entity: str = ""
    cause_event: str = ""
    cause_source: str = ""
    cause_rank: int | None = None
    confidence: float = 0.0
    explanation: str = ""
    severity: str = ""
    severity_why: str = ""
    owner: str = ""
    owner_rule: str = ""
    owner_why: str = ""
    first_signal_at: datetime | None = None
    last_signal_at: datetime | None = None
    signals: int = 0
    flags: list[str] = Field(default_factory=list)
    charged_gpu_hours: float = 0.0
    linked: list[str] = Field(default_factory=list)
    jobs: list[dict[str, Any]] = Field(default_factory=list)
    evidence: list[dict[str, Any]] = Field(default_factory=list)
    proposed: list[dict[str, Any]] = Field(default_factory=list)


def _assessed_v1(data: dict[str, Any]) -> dict[str, Any]:
    """v1 lost = GPUs x (rework + downtime + restore + recompute): the recompute (re-doing
    the thrown-away steps) is the same GPU time counted twice, so it is taken out. The GPUs
    are exact from the stored figures (GPUs = lost x 3600 / total). Queue time and setback
    were not recorded then: a v1 wait stays counted as held."""
    out = {k: v for k, v in data.items() if k != "recompute_s"}
    recompute = float(data.get("recompute_s") or 0.0)
    lost = float(data.get("lost_gpu_hours") or 0.0)
    kept = sum(float(data.get(k) or 0.0) for k in ("rework_s", "downtime_s", "restore_s"))
    if recompute > 0 and lost > 0:
        gpus = round(lost * 3600 / (kept + recompute))
        out["lost_gpu_hours"] = round(gpus * kept / 3600, 6)
    return out


class Resolved(Payload):
    KIND = "resolved"
    text: str = ""
    """How it was resolved (optional: the Resolution section and the resolved message say
    it)."""


class Reopened(Payload):
    KIND = "reopened"
    why: str = ""
    event_id: str = ""


class Closed(Payload):
    KIND = "closed"
    force: bool | None = None
    reason: str = ""


PAYLOADS: dict[str, type[Payload]] = {cls.KIND: cls for cls in (
    IncidentOpened, SignalAdded, SignalEnded, EvidenceAttached, JobImpacted,
    FailureStepUpdated, GpusRevised, CauseUpdated, SeverityChanged,
    OwnerAssigned, Acknowledged, CommanderAssigned, NoteAdded, Mitigated, Paged,
    TimeCorrected, RecoveryObserved,
    RecoveryVerified, ImpactAssessed, Resolved, Reopened, PostmortemDrafted,
    PostmortemSectionEdited, PostmortemReviewRequested, PostmortemChangesRequested,
    PostmortemApproved, PostmortemPublished, PostmortemAmended, PostmortemWaived,
    LearningRecorded, ActionAdded, ActionProposed, ActionUpdated, Closed, DiagnosisRevised)}

UPCASTERS: dict[tuple[str, int], Callable[[dict[str, Any]], dict[str, Any]]] = {
    ("postmortem_drafted", 1): _drafted_v1,
    ("postmortem_published", 1): _published_v1,
    ("impact_assessed", 1): _assessed_v1,
}
"""(kind, stored version) -> a function returning the next version's data."""


def parse(kind: str, data: dict[str, Any]) -> Payload:
    """The typed payload of a stored event, upcast to the current version first."""
    cls = PAYLOADS[kind]
    version = int(data.get("schema_version", 1))
    while version < cls.VERSION:
        data = {**UPCASTERS[(kind, version)](data), "schema_version": version + 1}
        version += 1
    return cls.model_validate(data)
