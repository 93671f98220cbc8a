"""The fold: incident state from its events, one case per payload class.

`apply` never fails on stored history (an event seen before changes nothing, a payload that
no longer parses is skipped). Replaying the log through `apply` reproduces the state
exactly, which is what `jobtrail replay` does.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from functools import singledispatch
from typing import Any

from pydantic import ValidationError

from processors.incidents.aggregate import Action, Evidence, Incident, JobImpact, Told
from processors.incidents.envelope import LIFECYCLE_TO, IncidentEvent
from processors.postmortem import state as postmortem
from schemas import incident_events as ev
from schemas.incident_events import Payload


def apply(state: Incident | None, event: IncidentEvent) -> Incident:
    """Fold one event; an event already applied (same id) changes nothing, and a payload
    that no longer parses is skipped (stored history never stops a fold)."""
    inc = state or Incident(id=event.incident_id)
    if event.id in inc.applied:
        return inc
    if _counted(event):
        if event.seq <= inc.seq:
            return inc  # a count folds once: this seq is already in
    else:
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


def _counted(event: IncidentEvent) -> bool:
    """A plain count of a signal (`signal_added` naming its event and nothing else): a
    sustained condition logs one every quarter group window for as long as it lasts, so its
    id is not kept in `applied` (which would grow with the incident's age). It is applied
    once by its seq instead: a fold takes the log in seq order and every decision is
    numbered after the state's last, so a count at or below the state's seq is in already.
    A decision to count the same signal twice is refused where it is taken (`signals`)."""
    if event.kind != "signal_added":
        return False
    data = event.data
    return bool(data.get("event_id")) and not (data.get("flag") or data.get("detail")
                                               or data.get("linked"))


_TOLD = {"acknowledged", "commander_assigned", "note_added", "mitigated", "paged", "resolved",
         "reopened", "closed", "severity_changed", "owner_assigned", "action_added",
         "action_updated"}
"""The kinds a person's event joins the story with (a processor's only when it pages)."""


def happened(payload: Payload, event: IncidentEvent) -> datetime:
    """When it happened: the time a person gave (`--at`), else when it was recorded."""
    return payload.at or event.time


def _told_text(p: Payload) -> str:
    if isinstance(p, ev.NoteAdded | ev.Mitigated | ev.Resolved):
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
    inc.cluster = p.cluster
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
def _(p: ev.SignalEnded, inc: Incident, event: IncidentEvent) -> None:
    inc.ended[p.ends] = p.ended_at or event.time


@_evolve.register
def _(p: ev.EvidenceAttached, inc: Incident, event: IncidentEvent) -> None:
    inc.evidence[p.event_id] = Evidence(p.event_id, p.time, p.type, p.source, p.entity, p.why,
                                        p.role, p.project, p.job_id, p.attempt)
    inc.dropped.pop(p.event_id, None)


_JOB_FIELDS = frozenset(JobImpact.__dataclass_fields__) - {"project", "job_id", "attempt"}


def _job(inc: Incident, p: ev.JobImpacted | ev.RecoveryObserved | ev.RecoveryVerified
         | ev.ImpactAssessed | ev.FailureStepUpdated | ev.GpusRevised) -> None:
    """Fold the fields a payload set into its attempt's impact."""
    if p.job is None:
        return
    key = p.job.key
    current = inc.jobs.get(key) or JobImpact(p.job.project, p.job.job_id, p.job.attempt)
    ref = (current.project, current.job_id, current.attempt)
    if ref in inc.moved:  # back in the incident
        inc.moved = tuple(m for m in inc.moved if m != ref)
    updates = {name: getattr(p, name) for name in p.model_fields_set & _JOB_FIELDS}
    inc.jobs[key] = replace(current, **updates) if updates else current


for _job_cls in (ev.JobImpacted, ev.RecoveryObserved, ev.FailureStepUpdated,
                 ev.RecoveryVerified, ev.GpusRevised):
    _evolve.register(_job_cls, lambda p, inc, event: _job(inc, p))


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


@_evolve.register
def _(p: ev.DiagnosisRevised, inc: Incident, event: IncidentEvent) -> None:
    if p.merged_into or not p.key:
        inc.merged_into, inc.withdrawn, inc.explanation = p.merged_into, True, p.why
        inc.status, inc.closed_at = "closed", event.time
        return
    if inc.withdrawn:  # later evidence gives it back
        inc.merged_into, inc.withdrawn, inc.status, inc.closed_at = "", False, "open", None
    inc.key, inc.klass, inc.entity, inc.title = p.key, p.klass, p.entity, p.title
    inc.cause_class, inc.cause_entity, inc.cause_event = p.cause_class, p.cause_entity, \
        p.cause_event
    inc.cause_source, inc.cause_rank, inc.cause_at = p.cause_source, p.cause_rank, event.time
    inc.confidence, inc.explanation = p.confidence, p.explanation
    inc.severity, inc.severity_why = p.severity or inc.severity, p.severity_why
    if inc.owner_rule != "manual":  # a person's assignment stands
        inc.owner, inc.owner_rule, inc.owner_why = p.owner, p.owner_rule, p.owner_why
    inc.first_signal_at, inc.last_signal_at = p.first_signal_at, p.last_signal_at
    inc.signals, inc.flags, inc.linked = p.signals, set(p.flags), tuple(p.linked)
    inc.charged_gpu_hours = p.charged_gpu_hours
    jobs = [_revived(JobImpact, data) for data in p.jobs]
    kept = {(j.project, j.job_id, j.attempt) for j in jobs}
    left = {(j.project, j.job_id, j.attempt) for j in inc.jobs.values()} - kept
    inc.moved = tuple(sorted((set(inc.moved) | left) - kept))
    inc.jobs = {job.key: job for job in jobs}
    evidence = {e.event_id: e for e in (_revived(Evidence, d) for d in p.evidence)}
    inc.dropped.update((i, e) for i, e in inc.evidence.items() if i not in evidence)
    for event_id in evidence:
        inc.dropped.pop(event_id, None)
    inc.evidence = evidence
    for action in (_revived(Action, d) for d in p.proposed):
        inc.actions.setdefault(action.action_id, action)


def _revived(cls: Any, data: dict[str, Any]) -> Any:
    """A dataclass from its JSON form (times back to datetimes, unknown keys ignored)."""
    known = cls.__dataclass_fields__
    values: dict[str, Any] = {k: datetime.fromisoformat(v) if isinstance(v, str) and (
        k.endswith("_at") or k in ("time", "degraded_since")) else v
        for k, v in data.items() if k in known}
    if "projects" in values:
        values["projects"] = tuple(values["projects"])
    return cls(**values)


_STAMPS = {"acknowledged": "acknowledged_at", "mitigated": "mitigated_at",
           "resolved": "resolved_at", "closed": "closed_at"}


def _lifecycle(inc: Incident, kind: str, time: datetime, event_id: str) -> None:
    inc.status = LIFECYCLE_TO[kind]
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

