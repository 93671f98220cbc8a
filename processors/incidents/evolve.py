"""The fold: incident state from its events, one case per payload class.

`apply` never fails on stored history (an event seen before changes nothing, a payload that
no longer parses is skipped). Replaying the log through `apply` reproduces the state
exactly, which is what `jobtrail replay` does.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from functools import singledispatch

from pydantic import ValidationError

from processors.incidents.aggregate import Action, Evidence, Incident, JobImpact
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
    return inc


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


def _lifecycle(inc: Incident, kind: str, time: datetime) -> None:
    inc.status = LIFECYCLE_TO[kind]
    stamp = {"acknowledged": "acknowledged_at", "mitigated": "mitigated_at",
             "resolved": "resolved_at", "closed": "closed_at"}.get(kind)
    if stamp:
        setattr(inc, stamp, time)
    if kind == "reopened":
        inc.resolved_at = inc.mitigated_at = None


for _cls in (ev.Acknowledged, ev.Mitigated, ev.Resolved, ev.Reopened, ev.Closed):
    _evolve.register(_cls, lambda p, inc, event: _lifecycle(inc, p.KIND, event.time))


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
             ev.PostmortemWaived, ev.LearningRecorded):
    _evolve.register(_pm_cls, lambda p, inc, event: postmortem.fold(inc.pm, p, event.actor.name,
                                                                 event.time))


def fold(events: list[IncidentEvent]) -> dict[str, Incident]:
    out: dict[str, Incident] = {}
    for event in sorted(events, key=lambda e: (e.incident_id, e.seq, e.id)):
        out[event.incident_id] = apply(out.get(event.incident_id), event)
    return out

