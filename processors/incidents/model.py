"""The incident aggregate: state is a fold over its events (DESIGN §6).

Every change is an `IncidentEvent` (an envelope around a typed payload from
`schemas.incident_events`) with a deterministic id, a per-incident `seq`, the event time of
what caused it and an `actor` (a person, a team, or the processor and rule). `apply` folds one
event into the state, one case per payload class, and never fails on stored history; `check`
refuses an invalid request with `InvalidTransition` naming the current state, from the
transition table `_FROM`. Replaying the log through `apply` reproduces the state exactly,
which is what `jobtrail replay` does.

Lifecycle: open -> acknowledged -> mitigated -> resolved -> closed, `reopened` on a regression
(resolved -> open). Nothing moves out of `closed`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import singledispatch
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from processors.postmortem import state as postmortem
from processors.postmortem.state import Postmortem, PostmortemRefused
from schemas import incident_events as ev
from schemas.incident_events import PAYLOADS, Payload, parse

KINDS = tuple(PAYLOADS)
STATUSES = ("open", "acknowledged", "mitigated", "resolved", "closed")
SEVERITIES = ("sev1", "sev2", "sev3", "sev4")

# lifecycle events: the statuses each may leave from, and where it goes
_FROM: dict[str, tuple[str, ...]] = {
    "acknowledged": ("open",),
    "mitigated": ("open", "acknowledged"),
    "resolved": ("open", "acknowledged", "mitigated"),
    "reopened": ("resolved",),
    "closed": ("resolved",),
}
_TO = {"acknowledged": "acknowledged", "mitigated": "mitigated", "resolved": "resolved",
       "reopened": "open", "closed": "closed"}
_AFTER_CLOSE = {"note_added", "time_corrected", "postmortem_amended", "action_updated",
                "action_added", "action_proposed",
                "postmortem_drafted", "postmortem_section_edited",
                "postmortem_review_requested", "postmortem_changes_requested",
                "postmortem_approved", "postmortem_published", "learning_recorded"}
ACTION_STATUSES = ("proposed", "open", "done", "not_doing", "dismissed")
_ACTION_DONE = {"done", "not_doing", "dismissed"}


class InvalidTransition(ValueError):
    """A request the incident's current state does not allow (the message says why)."""


class Actor(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["person", "team", "processor"]
    name: str = Field(min_length=1, max_length=200)
    rule: str = ""

    def label(self) -> str:
        return f"{self.kind}:{self.name}" + (f" (rule {self.rule})" if self.rule else "")


class IncidentEvent(BaseModel):
    """The envelope: what is stored in `incident_log` and on `jobtrail.incident-events`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    incident_id: str
    seq: int = Field(ge=1)
    kind: str
    time: datetime
    actor: Actor
    data: dict[str, Any] = Field(default_factory=dict)
    command_id: str = ""
    _payload: Payload | None = PrivateAttr(default=None)

    def payload(self) -> Payload:
        """The typed payload (parsed and upcast once, then kept)."""
        if self._payload is None:
            self._payload = parse(self.kind, self.data)
        return self._payload

    def to_json(self) -> str:
        return self.model_dump_json()


def event_id(incident_id: str, kind: str, discriminator: str) -> str:
    """Deterministic: the same decision about the same input is the same event."""
    digest = hashlib.sha256(f"{incident_id}\0{kind}\0{discriminator}".encode()).hexdigest()
    return f"ie-{digest[:24]}"


def incident_id(key: str, first_event: str) -> str:
    return "inc-" + hashlib.sha256(f"{key}\0{first_event}".encode()).hexdigest()[:16]


@dataclass(frozen=True)
class JobImpact:
    project: str
    job_id: str
    attempt: int
    gpus: int = 0
    started_at: datetime | None = None
    failed_at: datetime | None = None
    failure_step: int | None = None
    failure_step_source: str = ""  # job.failed / job.worker_exited (reported), progress
    last_checkpoint_step: int | None = None
    last_checkpoint_at: datetime | None = None
    degraded_since: datetime | None = None
    restarted_attempt: int | None = None
    restarted_at: datetime | None = None
    restored_step: int | None = None
    resumed_at: datetime | None = None
    verified_at: datetime | None = None
    lost_gpu_hours: float = 0.0
    lost_steps: int = 0
    rework_s: float = 0.0
    downtime_s: float = 0.0
    restore_s: float = 0.0
    recompute_s: float = 0.0
    degraded_s: float = 0.0
    duplicate_run: bool = False
    role: str = "failed"  # failed (the attempt died), degraded (a failed checkpoint, a
    # slow-down), linked (a standing incident's reference)

    @property
    def key(self) -> str:
        return f"{self.project}/{self.job_id}/{self.attempt}"

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


_TOLD = {"acknowledged", "commander_assigned", "note_added", "mitigated", "paged", "resolved",
         "reopened", "closed", "severity_changed", "owner_assigned", "action_added",
         "action_updated"}
"""The kinds a person's event joins the story with (a processor's only when it pages)."""


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
    evidence: dict[str, Evidence] = field(default_factory=dict)
    jobs: dict[str, JobImpact] = field(default_factory=dict)
    actions: dict[str, Action] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    charged_gpu_hours: float = 0.0  # loss charged here by other incidents (checkpoints)
    linked: tuple[str, ...] = ()  # incidents a standing incident links
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
    def job_scoped(self) -> bool:
        """An incident of one attempt's own (its key is the attempt), not an entity's."""
        return self.key.startswith("job:")


# --- the fold -------------------------------------------------------------------------------


def apply(state: Incident | None, event: IncidentEvent) -> Incident:
    """Fold one event; an event already applied (same id) changes nothing, and a payload
    that no longer parses is skipped (stored history never stops a fold)."""
    inc = state or Incident(id=event.incident_id)
    if event.id in inc.applied:
        return inc
    inc.applied.add(event.id)
    inc.seq = max(inc.seq, event.seq)
    if event.command_id:
        inc.commands.add(event.command_id)
    if event.actor.kind == "person":
        inc.people.add(event.actor.name)
    try:
        payload = event.payload()
    except (KeyError, ValidationError):
        return inc
    _evolve(payload, inc, event)
    if event.kind in _TOLD and (event.actor.kind != "processor" or event.kind == "paged"):
        inc.story[event.id] = Told(event.id, event.kind, happened(payload, event), event.time,
                                   event.actor.name, _told_text(payload))
    return inc


def happened(payload: Payload, event: IncidentEvent) -> datetime:
    """When it happened: the time a person gave (`--at`), else when it was recorded."""
    return payload.at or event.time


def _told_text(p: Payload) -> str:
    if isinstance(p, ev.NoteAdded | ev.Mitigated):
        return p.text
    if isinstance(p, ev.CommanderAssigned):
        return p.person
    if isinstance(p, ev.Paged):
        return p.who + (f": {p.why}" if p.why else "")
    if isinstance(p, ev.SeverityChanged):
        return p.severity + (f": {p.why}" if p.why else "")
    if isinstance(p, ev.OwnerAssigned):
        return p.team + (f": {p.why}" if p.why and p.rule != "manual" else "")
    if isinstance(p, ev.ActionAdded):
        return f"{p.action_id} {p.title}"
    if isinstance(p, ev.ActionUpdated):
        return f"{p.action_id} " + ", ".join(
            f"{k} {getattr(p, k)}" for k in ("status", "owner", "due", "tracker")
            if getattr(p, k) is not None)
    return ""


@singledispatch
def _evolve(payload: Payload, inc: Incident, event: IncidentEvent) -> None:
    """Kinds with nothing to fold (a postmortem text lives in its own views)."""


@_evolve.register
def _(p: ev.IncidentOpened, inc: Incident, event: IncidentEvent) -> None:
    inc.key, inc.title, inc.klass, inc.entity = p.key, p.title, p.klass, p.entity
    inc.rule, inc.opened_at, inc.status = event.actor.rule, event.time, "open"
    inc.first_signal_at = inc.last_signal_at = p.first_signal_at or event.time


@_evolve.register
def _(p: ev.SignalAdded, inc: Incident, event: IncidentEvent) -> None:
    if p.event_id:
        inc.signals += p.count
        inc.last_signal_at = max(filter(None, (inc.last_signal_at, event.time)))
    if p.linked:
        inc.linked = tuple(sorted({*inc.linked, p.linked}))
    if p.flag:
        inc.flags.add(p.flag)


@_evolve.register
def _(p: ev.EvidenceAttached, inc: Incident, event: IncidentEvent) -> None:
    inc.evidence[p.event_id] = Evidence(p.event_id, p.time, p.type, p.source, p.entity, p.why,
                                        p.role, p.project, p.job_id, p.attempt)


_JOB_FIELDS = frozenset(JobImpact.__dataclass_fields__) - {"project", "job_id", "attempt"}


def _job(inc: Incident, p: ev.JobImpacted | ev.RecoveryObserved | ev.RecoveryVerified
         | ev.ImpactAssessed | ev.FailureStepUpdated) -> None:
    """Fold the fields a payload set into its attempt's impact."""
    if p.job is None:
        return
    key = p.job.key
    current = inc.jobs.get(key) or JobImpact(p.job.project, p.job.job_id, p.job.attempt)
    updates = {name: getattr(p, name) for name in p.model_fields_set & _JOB_FIELDS}
    inc.jobs[key] = replace(current, **updates) if updates else current


@_evolve.register
def _(p: ev.JobImpacted, inc: Incident, event: IncidentEvent) -> None:
    _job(inc, p)


@_evolve.register
def _(p: ev.RecoveryObserved, inc: Incident, event: IncidentEvent) -> None:
    _job(inc, p)


@_evolve.register
def _(p: ev.FailureStepUpdated, inc: Incident, event: IncidentEvent) -> None:
    _job(inc, p)


@_evolve.register
def _(p: ev.RecoveryVerified, inc: Incident, event: IncidentEvent) -> None:
    _job(inc, p)


@_evolve.register
def _(p: ev.ImpactAssessed, inc: Incident, event: IncidentEvent) -> None:
    _job(inc, p)
    if p.charged_gpu_hours is not None:
        inc.charged_gpu_hours = round(inc.charged_gpu_hours + p.charged_gpu_hours, 6)


@_evolve.register
def _(p: ev.CauseUpdated, inc: Incident, event: IncidentEvent) -> None:
    inc.cause_class, inc.cause_entity, inc.cause_event = p.klass, p.entity, p.event_id
    inc.cause_source, inc.confidence, inc.explanation = p.source, p.confidence, p.explanation
    inc.cause_rank, inc.cause_at = p.rank, event.time
    inc.klass = p.klass or inc.klass
    inc.entity = p.entity or inc.entity


@_evolve.register
def _(p: ev.SeverityChanged, inc: Incident, event: IncidentEvent) -> None:
    inc.severity, inc.severity_why = p.severity, p.why


@_evolve.register
def _(p: ev.OwnerAssigned, inc: Incident, event: IncidentEvent) -> None:
    inc.owner, inc.owner_rule, inc.owner_why = p.team, p.rule, p.why


@_evolve.register
def _(p: ev.CommanderAssigned, inc: Incident, event: IncidentEvent) -> None:
    inc.commander = p.person
    inc.people.add(p.person)


@_evolve.register
def _(p: ev.NoteAdded, inc: Incident, event: IncidentEvent) -> None:
    inc.notes = (*inc.notes, p.text)


_STAMPS = {"acknowledged": "acknowledged_at", "mitigated": "mitigated_at",
           "resolved": "resolved_at", "closed": "closed_at"}


def _lifecycle(inc: Incident, kind: str, time: datetime, event_id: str) -> None:
    inc.status = _TO[kind]
    stamp = _STAMPS.get(kind)
    if stamp:
        setattr(inc, stamp, time)
        inc.stamps[stamp] = event_id
    if kind == "reopened":
        inc.resolved_at = inc.mitigated_at = None
        inc.stamps.pop("resolved_at", None)
        inc.stamps.pop("mitigated_at", None)


for _cls in (ev.Acknowledged, ev.Mitigated, ev.Resolved, ev.Reopened, ev.Closed):
    _evolve.register(_cls, lambda p, inc, event: _lifecycle(inc, p.KIND, happened(p, event),
                                                            event.id))


@_evolve.register
def _(p: ev.TimeCorrected, inc: Incident, event: IncidentEvent) -> None:
    if p.at is None:
        return
    told = inc.story.get(p.event_id)
    if told is not None:
        inc.story[p.event_id] = replace(told, at=p.at, corrected=True)
    for stamp, source in inc.stamps.items():
        if source == p.event_id:
            setattr(inc, stamp, p.at)


@_evolve.register
def _(p: ev.ActionAdded, inc: Incident, event: IncidentEvent) -> None:
    inc.actions[p.action_id] = Action(p.action_id, p.title, p.owner, "open", p.due,
                                      tuple(p.projects), p.kind, p.priority, p.tracker)


@_evolve.register
def _(p: ev.ActionProposed, inc: Incident, event: IncidentEvent) -> None:
    if p.action_id not in inc.actions:  # a proposal never overwrites what people did
        inc.actions[p.action_id] = Action(p.action_id, p.title, p.owner, "proposed",
                                          kind=p.kind, why=p.why, rule=p.rule)


@_evolve.register
def _(p: ev.ActionUpdated, inc: Incident, event: IncidentEvent) -> None:
    old = inc.actions.get(p.action_id) or Action(p.action_id, "")
    changed = {k: getattr(p, k) for k in ("title", "owner", "status", "due", "reason",
                                          "priority", "tracker", "kind")
               if getattr(p, k) is not None}
    inc.actions[p.action_id] = replace(old, **changed)


for _pm_cls in (ev.PostmortemDrafted, ev.PostmortemSectionEdited, ev.PostmortemReviewRequested,
             ev.PostmortemChangesRequested, ev.PostmortemApproved, ev.PostmortemPublished,
             ev.PostmortemAmended, ev.PostmortemWaived, ev.LearningRecorded):
    _evolve.register(_pm_cls, lambda p, inc, event: postmortem.fold(inc.pm, p, event.actor.name,
                                                                 event.time))


def fold(events: list[IncidentEvent]) -> dict[str, Incident]:
    out: dict[str, Incident] = {}
    for event in sorted(events, key=lambda e: (e.incident_id, e.seq, e.id)):
        out[event.incident_id] = apply(out.get(event.incident_id), event)
    return out


# --- deciding -------------------------------------------------------------------------------


def check(state: Incident | None, payload: Payload, actor: Actor | None = None) -> None:
    """Raise InvalidTransition when `payload` is not allowed from the current state (or by
    this actor: a postmortem's approver is not its author)."""
    kind = payload.KIND
    if kind == "opened":
        if state is not None and state.opened_at is not None:
            raise InvalidTransition(f"incident {state.id} is already open")
        return
    if state is None or state.opened_at is None:
        raise InvalidTransition("no such incident")
    if state.status == "closed" and kind not in _AFTER_CLOSE:
        raise InvalidTransition(f"incident {state.id} is closed: {kind} is not allowed")
    allowed = _FROM.get(kind)
    if allowed and state.status not in allowed:
        raise InvalidTransition(f"cannot go to {_TO[kind]} from {state.status} (allowed from: "
                                f"{', '.join(allowed)})")
    if isinstance(payload, ev.TimeCorrected):
        if payload.at is None:
            raise InvalidTransition("correct_time: give the time it happened (at)")
        if payload.event_id not in state.story:
            raise InvalidTransition(f"no event {payload.event_id!r} of a person's on "
                                    f"{state.id} to correct (see `jobtrail incident show`)")
    if isinstance(payload, ev.SeverityChanged) and payload.severity not in SEVERITIES:
        raise InvalidTransition(f"severity must be one of {', '.join(SEVERITIES)}")
    if isinstance(payload, ev.ActionAdded | ev.ActionUpdated):
        from processors.incidents.followups import field_problem

        if problem := field_problem(payload):
            raise InvalidTransition(problem)
    if isinstance(payload, ev.ActionUpdated):
        if payload.action_id not in state.actions:
            raise InvalidTransition(f"no action {payload.action_id!r} on {state.id}")
        if payload.status is not None and payload.status not in ACTION_STATUSES:
            raise InvalidTransition(f"action status must be one of "
                                    f"{', '.join(ACTION_STATUSES)}")
        if payload.status in ("not_doing", "dismissed") and not payload.reason:
            raise InvalidTransition(f"{payload.status} needs a reason")
    if kind.startswith("postmortem_") or kind == "learning_recorded":
        try:
            postmortem.check(state.pm, payload, actor.name if actor else "", state.severity)
        except PostmortemRefused as exc:
            raise InvalidTransition(str(exc)) from None
    if isinstance(payload, ev.Closed):
        from processors.postmortem.checklist import blocking

        still = blocking(state)
        if payload.force and not payload.reason:
            raise InvalidTransition("a forced close waives the checklist: give a reason")
        if still and not payload.force:
            raise InvalidTransition(f"the commander checklist is open: {', '.join(still)} "
                                    "(finish it, or force the close with a reason)")


def new_event(state: Incident | None, incident: str, payload: Payload, time: datetime,
              actor: Actor, discriminator: str, command_id: str = "") -> IncidentEvent:
    """A validated event for `incident`, numbered after the state's last seq."""
    check(state, payload, actor)
    event = IncidentEvent(id=event_id(incident, payload.KIND, discriminator),
                          incident_id=incident, seq=(state.seq if state else 0) + 1,
                          kind=payload.KIND, time=time, actor=actor, data=payload.data(),
                          command_id=command_id)
    event._payload = payload
    return event


# --- people's commands ----------------------------------------------------------------------

COMMANDS: dict[str, type[Payload]] = {
    "ack": ev.Acknowledged, "assign": ev.OwnerAssigned, "commander": ev.CommanderAssigned,
    "note": ev.NoteAdded, "mitigate": ev.Mitigated, "resolve": ev.Resolved,
    "reopen": ev.Reopened, "close": ev.Closed, "severity": ev.SeverityChanged,
    "add_action": ev.ActionAdded, "update_action": ev.ActionUpdated,
    "accept_action": ev.ActionUpdated, "dismiss_action": ev.ActionUpdated,
    "draft_postmortem": ev.PostmortemDrafted, "publish_postmortem": ev.PostmortemPublished,
    "edit_postmortem": ev.PostmortemSectionEdited, "request_review": ev.PostmortemReviewRequested,
    "request_changes": ev.PostmortemChangesRequested,
    "approve_postmortem": ev.PostmortemApproved, "waive_postmortem": ev.PostmortemWaived,
    "record_learning": ev.LearningRecorded, "page": ev.Paged, "correct_time": ev.TimeCorrected,
    "amend_postmortem": ev.PostmortemAmended,
}
CommandName = Literal["ack", "assign", "commander", "note", "mitigate", "resolve", "reopen",
                      "close", "severity", "add_action", "update_action", "accept_action",
                      "dismiss_action", "draft_postmortem", "publish_postmortem",
                      "edit_postmortem", "request_review", "request_changes",
                      "approve_postmortem", "waive_postmortem", "record_learning", "page",
                      "correct_time", "amend_postmortem"]


class Command(BaseModel):
    """A request from a person or team (`jobtrail.incident-commands`, the API, the CLI)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    command_id: str = Field(min_length=1, max_length=200)
    incident_id: str = Field(min_length=1)
    command: CommandName
    actor: Actor
    time: datetime
    """When it is recorded (the caller's clock)."""
    data: dict[str, Any] = Field(default_factory=dict)
    at: datetime | None = None
    """When it happened, if not now (`--at`): kept in the payload beside the record time."""

    def payload(self) -> Payload:
        """The event this command asks for; InvalidTransition names a bad field."""
        data = dict(self.data)
        if self.at is not None:
            at = self.at if self.at.tzinfo else self.at.replace(tzinfo=UTC)
            if at > self.time:
                raise InvalidTransition(f"{self.command}: at: {at:%Y-%m-%d %H:%M:%SZ} is "
                                        "after the time it is recorded: a time to come "
                                        "cannot have happened")
            data["at"] = at
        if self.command == "assign":
            data.setdefault("why", f"assigned by {self.actor.label()}")
            data["rule"] = "manual"
        elif self.command == "add_action":
            data.setdefault("action_id", "act-" + hashlib.sha256(
                self.command_id.encode()).hexdigest()[:10])
        elif self.command == "accept_action":
            data["status"] = "open"
        elif self.command == "dismiss_action":
            data["status"] = "dismissed"
        try:
            return COMMANDS[self.command].model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise InvalidTransition(f"{self.command}: {where}: {first['msg']}") from None
