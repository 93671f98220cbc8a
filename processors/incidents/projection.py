"""Incident state -> the ClickHouse current-state projections (`incidents`,
`incident_evidence`, `incident_jobs`, `actions`). Rows carry the incident's `seq` as their
version, so ReplacingMergeTree keeps the newest; `jobtrail replay` recomputes them all from
`incident_log` with the same functions."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

from processors.incidents.aggregate import JobImpact
from processors.incidents.model import Incident, IncidentEvent
from processors.postmortem.checklist import postmortem_due

WITHDRAWN = "withdrawn"
"""The flag of an incident's row that the events in time order do not give (its attempts,
if any, went into another one: `merged_into`)."""
MOVED = "moved"
"""The role of an attempt's row in an incident it no longer belongs to (a revision moved it,
or the incident was withdrawn into another): no GPUs, no loss, left out of every listing; and
of an evidence row a revision took out."""


def _t(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def log_row(event: IncidentEvent) -> dict[str, Any]:
    return {"id": event.id, "incident_id": event.incident_id, "seq": event.seq,
            "kind": event.kind, "time": event.time.isoformat(), "actor_kind": event.actor.kind,
            "actor": event.actor.name, "rule": event.actor.rule,
            "credential": event.actor.credential,
            "data": event.model_dump_json(include={"data"})[8:-1],
            "command_id": event.command_id}


def incident_row(inc: Incident) -> dict[str, Any]:
    """A withdrawn incident's row keeps its projects (who may read why it was withdrawn) but
    holds no attempt, GPU or loss (they are counted in the incident it went into) and is
    flagged `withdrawn`."""
    held = [] if inc.withdrawn else list(inc.jobs.values())
    return {
        "incident_id": inc.id, "version": inc.seq, "key": inc.key, "cluster": inc.cluster,
        "status": inc.status,
        "title": inc.title, "class": inc.klass, "entity": inc.entity, "rule": inc.rule,
        "cause_class": inc.cause_class, "cause_entity": inc.cause_entity,
        "cause_event": inc.cause_event, "confidence": inc.confidence,
        "explanation": inc.explanation, "severity": inc.severity,
        "severity_why": inc.severity_why, "owner": inc.owner, "owner_rule": inc.owner_rule,
        "owner_why": inc.owner_why, "commander": inc.commander,
        "opened_at": _t(inc.opened_at), "acknowledged_at": _t(inc.acknowledged_at),
        "mitigated_at": _t(inc.mitigated_at), "resolved_at": _t(inc.resolved_at),
        "closed_at": _t(inc.closed_at), "first_signal_at": _t(inc.first_signal_at),
        "last_signal_at": _t(inc.last_signal_at), "signals": inc.signals,
        "impacted_jobs": len({(j.project, j.job_id) for j in held if j.role != "linked"}),
        "impacted_gpus": sum(j.gpus for j in held if j.role == "failed"),
        "lost_gpu_hours": 0.0 if inc.withdrawn else inc.lost_gpu_hours,
        "loss_unknown": "" if inc.withdrawn else inc.loss_unknown,
        "lost_steps": 0 if inc.withdrawn else inc.lost_steps,
        "recovery": inc.recovery, "projects": inc.projects,
        "flags": sorted(inc.flags | ({WITHDRAWN} if inc.withdrawn else set())),
        "linked": list(inc.linked), "postmortem_status": inc.pm.status,
        "postmortem_owner": inc.pm.owner, "postmortem_due": postmortem_due(inc) or inc.pm.due,
    }


def evidence_rows(inc: Incident, only: set[str] | None = None) -> list[dict[str, Any]]:
    """The evidence's rows (`only`: these ids); all of them with the evidence a revision took
    out, as `moved` rows."""
    chosen = [*inc.evidence.values(), *(replace(e, role=MOVED) for e in inc.dropped.values())
              ] if only is None else [inc.evidence[i] for i in sorted(only) if i in inc.evidence]
    return [{"incident_id": inc.id, "event_id": e.event_id, "time": e.time.isoformat(),
             "type": e.type, "source": e.source, "entity": e.entity, "why": e.why,
             "role": e.role, "project": e.project, "job_id": e.job_id,
             "attempt": e.attempt or 0} for e in chosen]


def job_rows(inc: Incident) -> list[dict[str, Any]]:
    """The attempts' rows; a withdrawn incident's and the moved-out attempts' as `moved`."""
    moved = [*inc.moved] + ([(j.project, j.job_id, j.attempt) for j in inc.jobs.values()]
                            if inc.withdrawn else [])
    held = [] if inc.withdrawn else list(inc.jobs.values())
    return [_job_row(inc, j) for j in held] + [
        _job_row(inc, JobImpact(p, j, a, gpus=0, role=MOVED)) for p, j, a in moved]


def _job_row(inc: Incident, j: JobImpact) -> dict[str, Any]:
    return {"incident_id": inc.id, "project": j.project, "job_id": j.job_id,
            "attempt": j.attempt, "role": j.role, "gpus": j.gpus, "gpus_source": j.gpus_source,
            "failed_at": _t(j.failed_at),
            "failure_step": j.failure_step, "failure_step_source": j.failure_step_source,
            "last_checkpoint_step": j.last_checkpoint_step,
            "last_checkpoint_at": _t(j.last_checkpoint_at),
            "restarted_attempt": j.restarted_attempt, "restarted_job": j.restarted_job or "",
            "restarted_at": _t(j.restarted_at),
            "restored_step": j.restored_step, "resumed_at": _t(j.resumed_at),
            "verified_at": _t(j.verified_at), "lost_gpu_hours": j.lost_gpu_hours,
            "loss_unknown": j.loss_unknown,
            "lost_steps": j.lost_steps, "rework_s": j.rework_s, "downtime_s": j.downtime_s,
            "restore_s": j.restore_s, "queue_s": j.queue_s, "unheld_s": j.unheld_s,
            "setback_s": j.setback_s,
            "degraded_s": j.degraded_s, "recovery": j.recovery,
            "duplicate_run": j.duplicate_run, "version": inc.seq}


def action_rows(inc: Incident) -> list[dict[str, Any]]:
    return [{"incident_id": inc.id, "action_id": a.action_id, "title": a.title,
             "owner": a.owner, "status": a.status, "due": a.due, "projects": list(a.projects),
             "kind": a.kind, "priority": a.priority, "tracker": a.tracker, "reason": a.reason,
             "why": a.why, "rule": a.rule, "version": inc.seq}
            for a in inc.actions.values()]


def projection_rows(incidents: list[Incident], changes: list[IncidentEvent] | None = None,
                    ) -> dict[str, list[dict[str, Any]]]:
    """Rows for the incidents' projections. With `changes` (a batch's new events) only the
    evidence, jobs and actions those events touched are written (an incident with 64 ranks'
    evidence is not rewritten at every batch); without, everything (`jobtrail replay`)."""
    if changes is None:
        return {
            "incidents": [incident_row(i) for i in incidents],
            "incident_evidence": [r for i in incidents for r in evidence_rows(i)],
            "incident_jobs": [r for i in incidents for r in job_rows(i)],
            "actions": [r for i in incidents for r in action_rows(i)],
        }
    evidence: dict[str, set[str]] = {}
    jobs: dict[str, set[str]] = {}
    actions: dict[str, set[str]] = {}
    # a revision replaces an incident's impacted attempts, evidence and proposals at once
    # (late evidence, two failures at the same instant): all of its rows are written again
    revised = {e.incident_id for e in changes if e.kind == "diagnosis_revised"}
    for e in changes:
        if e.kind == "evidence_attached":
            evidence.setdefault(e.incident_id, set()).add(e.data["event_id"])
        elif "job" in e.data:
            job = e.data["job"]
            jobs.setdefault(e.incident_id, set()).add(
                f"{job['project']}/{job['job_id']}/{job['attempt']}")
        elif e.kind in ("action_added", "action_updated", "action_proposed"):
            actions.setdefault(e.incident_id, set()).add(e.data["action_id"])
    return {
        "incidents": [incident_row(i) for i in incidents],
        "incident_evidence": [r for i in incidents for r in evidence_rows(
            i, None if i.id in revised else evidence.get(i.id, set()))],
        "incident_jobs": [r for i in incidents for r in job_rows(i) if i.id in revised
                          or f"{r['project']}/{r['job_id']}/{r['attempt']}" in
                          jobs.get(i.id, ())],
        "actions": [r for i in incidents for r in action_rows(i)
                    if i.id in revised or r["action_id"] in actions.get(i.id, ())],
    }
