"""The incident aggregate: state is a fold over its events (DESIGN §6).

Every change is an `IncidentEvent` with a deterministic id, a per-incident `seq`, the event
time of what caused it and an `actor` (a person, a team, or the processor and rule). `apply`
folds one event into the state and never fails; `decide` turns a request (from a person or
from the detector) into events, rejecting invalid transitions with `InvalidTransition`
naming the current state. Replaying the log through `apply` reproduces the state exactly,
which is what `jobtrail replay` does.

Lifecycle: open -> acknowledged -> mitigated -> resolved -> closed, `reopened` on a regression
(resolved -> open). Nothing moves out of `closed`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

KINDS = (
    "opened", "signal_added", "evidence_attached", "job_impacted", "cause_updated",
    "severity_changed", "owner_assigned", "acknowledged", "commander_assigned", "note_added",
    "mitigated", "recovery_observed", "recovery_verified", "impact_assessed", "resolved",
    "reopened", "postmortem_drafted", "postmortem_published", "action_added", "action_updated",
    "closed",
)
Kind = Literal[
    "opened", "signal_added", "evidence_attached", "job_impacted", "cause_updated",
    "severity_changed", "owner_assigned", "acknowledged", "commander_assigned", "note_added",
    "mitigated", "recovery_observed", "recovery_verified", "impact_assessed", "resolved",
    "reopened", "postmortem_drafted", "postmortem_published", "action_added", "action_updated",
    "closed",
]
STATUSES = ("open", "acknowledged", "mitigated", "resolved", "closed")
SEVERITIES = ("sev1", "sev2", "sev3", "sev4")

# which statuses each lifecycle event may leave from
_FROM: dict[str, tuple[str, ...]] = {
    "acknowledged": ("open",),
    "mitigated": ("open", "acknowledged"),
    "resolved": ("open", "acknowledged", "mitigated"),
    "reopened": ("resolved",),
    "closed": ("resolved",),
}
_TO = {"acknowledged": "acknowledged", "mitigated": "mitigated", "resolved": "resolved",
       "reopened": "open", "closed": "closed"}


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
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    incident_id: str
    seq: int = Field(ge=1)
    kind: Kind
    time: datetime
    actor: Actor
    data: dict[str, Any] = Field(default_factory=dict)
    command_id: str = ""

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
    failed_at: datetime | None = None
    failure_step: int | None = None
    last_checkpoint_step: int | None = None
    last_checkpoint_at: datetime | None = None
    restarted_attempt: int | None = None
    restarted_at: datetime | None = None
    restored_step: int | None = None
    resumed_at: datetime | None = None
    verified_at: datetime | None = None
    lost_gpu_hours: float = 0.0
    lost_steps: int = 0
    duplicate_run: bool = False
    role: str = "failed"  # failed (the attempt died), degraded (e.g. a failed checkpoint),
    # linked (a standing incident's reference)

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
    role: str  # cause, symptom, signal, recovery, impact
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
    postmortem: str = ""
    postmortem_status: str = ""
    flags: set[str] = field(default_factory=set)  # repeat, no_restart, duplicate_run
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
        states = {j.recovery for j in self.jobs.values() if j.role == "failed"}
        if not states:
            return ""
        return "verified" if states == {"verified"} else min(
            states, key=["awaiting_restart", "restarted", "restored", "progress_resumed",
                         "verified"].index)

    @property
    def projects(self) -> list[str]:
        return sorted({j.project for j in self.jobs.values()})

    @property
    def active(self) -> bool:
        return self.status not in ("resolved", "closed")


def _time(value: Any) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    from schemas.events import parse_time

    return parse_time(value)


def _impact(job: JobImpact, data: dict[str, Any]) -> JobImpact:
    updates: dict[str, Any] = {}
    for name in JobImpact.__dataclass_fields__:
        if name in data and name not in ("project", "job_id", "attempt"):
            value = data[name]
            if name.endswith("_at"):
                value = _time(value)
            updates[name] = value
    return replace(job, **updates)


def apply(state: Incident | None, event: IncidentEvent) -> Incident:
    """Fold one event; an event already applied (same id) changes nothing."""
    inc = state or Incident(id=event.incident_id)
    if event.id in inc.applied:
        return inc
    d = event.data
    kind = event.kind
    inc.applied.add(event.id)
    changes: dict[str, Any] = {"seq": max(inc.seq, event.seq)}
    if event.command_id:
        inc.commands.add(event.command_id)
    if kind == "opened":
        changes.update(key=d.get("key", ""), title=d.get("title", ""),
                       klass=d.get("class", "unknown"), entity=d.get("entity", ""),
                       rule=event.actor.rule, opened_at=event.time, status="open",
                       first_signal_at=_time(d.get("first_signal_at")) or event.time,
                       last_signal_at=_time(d.get("first_signal_at")) or event.time)
    elif kind == "signal_added":
        if d.get("event_id"):
            changes.update(signals=inc.signals + 1,
                           last_signal_at=max(filter(None, (inc.last_signal_at, event.time))))
        if d.get("linked"):
            changes["linked"] = tuple(sorted({*inc.linked, str(d["linked"])}))
        if d.get("flag"):
            inc.flags.add(str(d["flag"]))
    elif kind == "evidence_attached":
        ev = Evidence(event_id=d["event_id"], time=_time(d["time"]) or event.time,
                      type=d.get("type", ""), source=d.get("source", ""),
                      entity=d.get("entity", ""), why=d.get("why", ""),
                      role=d.get("role", "signal"), project=d.get("project", ""),
                      job_id=d.get("job_id", ""), attempt=d.get("attempt"))
        inc.evidence[ev.event_id] = ev
    elif kind in ("job_impacted", "recovery_observed", "recovery_verified", "impact_assessed"):
        if "job" in d:
            project, job_id, attempt = d["job"]["project"], d["job"]["job_id"], d["job"]["attempt"]
            key = f"{project}/{job_id}/{attempt}"
            current = inc.jobs.get(key) or JobImpact(project, job_id, int(attempt))
            inc.jobs[key] = _impact(current, d)
        if kind == "impact_assessed" and "charged_gpu_hours" in d:
            changes["charged_gpu_hours"] = round(inc.charged_gpu_hours
                                                 + float(d["charged_gpu_hours"]), 6)
    elif kind == "cause_updated":
        changes.update(cause_class=d.get("class", ""), cause_entity=d.get("entity", ""),
                       cause_event=d.get("event_id", ""), cause_source=d.get("source", ""),
                       confidence=float(d.get("confidence", 0.0)),
                       explanation=d.get("explanation", ""),
                       klass=d.get("class") or inc.klass,
                       entity=d.get("entity") or inc.entity)
    elif kind == "severity_changed":
        changes.update(severity=d["severity"], severity_why=d.get("why", ""))
    elif kind == "owner_assigned":
        changes.update(owner=d["team"], owner_rule=d.get("rule", ""), owner_why=d.get("why", ""))
    elif kind == "commander_assigned":
        changes["commander"] = d["person"]
    elif kind == "note_added":
        changes["notes"] = (*inc.notes, str(d.get("text", "")))
    elif kind in _TO:
        changes["status"] = _TO[kind]
        stamp = {"acknowledged": "acknowledged_at", "mitigated": "mitigated_at",
                 "resolved": "resolved_at", "closed": "closed_at"}.get(kind)
        if stamp:
            changes[stamp] = event.time
        if kind == "reopened":
            changes.update(resolved_at=None, mitigated_at=None)
    elif kind == "action_added":
        action = Action(d["action_id"], d.get("title", ""), d.get("owner", ""), "open",
                        d.get("due", ""), tuple(d.get("projects") or ()))
        inc.actions[action.action_id] = action
    elif kind == "action_updated":
        old = inc.actions.get(d["action_id"]) or Action(d["action_id"], "")
        inc.actions[old.action_id] = replace(
            old, **{k: d[k] for k in ("title", "owner", "status", "due") if k in d})
    elif kind in ("postmortem_drafted", "postmortem_published"):
        changes.update(postmortem=d.get("text", inc.postmortem),
                       postmortem_status="published" if kind == "postmortem_published"
                       else "draft")
    for name, value in changes.items():
        setattr(inc, name, value)
    return inc


def fold(events: list[IncidentEvent]) -> dict[str, Incident]:
    out: dict[str, Incident] = {}
    for event in sorted(events, key=lambda e: (e.incident_id, e.seq, e.id)):
        out[event.incident_id] = apply(out.get(event.incident_id), event)
    return out


def check(state: Incident | None, kind: str, data: dict[str, Any]) -> None:
    """Raise InvalidTransition when `kind` is not allowed from the current state."""
    if kind == "opened":
        if state is not None and state.opened_at is not None:
            raise InvalidTransition(f"incident {state.id} is already open")
        return
    if state is None or state.opened_at is None:
        raise InvalidTransition("no such incident")
    if state.status == "closed" and kind not in ("note_added", "action_updated",
                                                 "postmortem_published", "action_added"):
        raise InvalidTransition(f"incident {state.id} is closed: {kind} is not allowed")
    allowed = _FROM.get(kind)
    if allowed and state.status not in allowed:
        raise InvalidTransition(f"cannot go to {_TO[kind]} from {state.status} (allowed from: "
                                f"{', '.join(allowed)})")
    if kind == "severity_changed" and data.get("severity") not in SEVERITIES:
        raise InvalidTransition(f"severity must be one of {', '.join(SEVERITIES)}")
    if kind == "owner_assigned" and not data.get("team"):
        raise InvalidTransition("owner_assigned needs a team")
    if kind == "commander_assigned" and not data.get("person"):
        raise InvalidTransition("commander_assigned needs a person")
    if kind == "action_updated" and data.get("action_id") not in state.actions:
        raise InvalidTransition(f"no action {data.get('action_id')!r} on {state.id}")
    if kind == "closed" and any(a.status == "open" for a in state.actions.values()) and \
            not data.get("force"):
        raise InvalidTransition("open follow-up actions remain (close them or pass force)")


def new_event(state: Incident | None, incident: str, kind: str, time: datetime, actor: Actor,
              data: dict[str, Any], discriminator: str, command_id: str = "") -> IncidentEvent:
    """A validated event for `incident`, numbered after the state's last seq."""
    check(state, kind, data)
    return IncidentEvent(id=event_id(incident, kind, discriminator), incident_id=incident,
                         seq=(state.seq if state else 0) + 1, kind=kind,
                         time=time, actor=actor, data=_plain(data),
                         command_id=command_id)


COMMANDS: dict[str, str] = {
    "ack": "acknowledged", "assign": "owner_assigned", "commander": "commander_assigned",
    "note": "note_added", "mitigate": "mitigated", "resolve": "resolved", "reopen": "reopened",
    "close": "closed", "severity": "severity_changed", "add_action": "action_added",
    "update_action": "action_updated", "draft_postmortem": "postmortem_drafted",
    "publish_postmortem": "postmortem_published",
}


class Command(BaseModel):
    """A request from a person or team (`jobtrail.incident-commands`, the API, the CLI)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    command_id: str = Field(min_length=1, max_length=200)
    incident_id: str = Field(min_length=1)
    command: Literal["ack", "assign", "commander", "note", "mitigate", "resolve", "reopen",
                     "close", "severity", "add_action", "update_action", "draft_postmortem",
                     "publish_postmortem"]
    actor: Actor
    time: datetime
    data: dict[str, Any] = Field(default_factory=dict)

    def event(self) -> tuple[str, dict[str, Any]]:
        kind = COMMANDS[self.command]
        data = dict(self.data)
        if kind == "owner_assigned":
            data.setdefault("rule", "manual")
            data.setdefault("why", f"assigned by {self.actor.label()}")
            data["rule"] = "manual"
        if kind == "action_added":
            data.setdefault("action_id", "act-" + hashlib.sha256(
                self.command_id.encode()).hexdigest()[:10])
        return kind, data


_SCALARS = (str, int, float, bool, type(None))


def _plain(data: dict[str, Any]) -> dict[str, Any]:
    """JSON-safe data: scalars and nested dicts/lists of them pass as they are (the hot
    path); anything else goes through a JSON round trip."""
    def ok(value: Any) -> bool:
        if isinstance(value, _SCALARS):
            return True
        if isinstance(value, dict):
            return all(isinstance(k, str) and ok(v) for k, v in value.items())
        if isinstance(value, list):
            return all(ok(v) for v in value)
        return False

    return data if ok(data) else json.loads(json.dumps(data, default=str))
