"""What a notification says, channel-neutral: the incident as of when the message may go
out, as its subscriber may see it (only their projects' jobs; text naming another project's
job replaced), redacted like storage. Channels (`channels.py`) turn it into their shapes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote

from ingest.redact import redact_text
from processors.incidents.model import Incident, IncidentEvent, fold, recovery_of
from processors.notify.model import Decision, Subscription

HEADLINES = {
    "first": "opened, owned by {owner}", "opened": "opened, owned by {owner}",
    "cause_changed": "cause now {klass} on {entity}",
    "severity_raised": "severity raised to {severity} ({why})",
    "owner_changed": "now owned by {owner}", "mitigated": "mitigated",
    "recovery_verified": "recovery verified", "recovery_failed": "no restart: recovery failed",
    "resolved": "resolved", "reopened": "reopened",
    "postmortem_published": "postmortem published", "repeat": "still unacknowledged",
    "postmortem_due": "postmortem due", "followup_overdue": "a follow-up is overdue",
    "followup_proposed": "a follow-up for another team than {owner}",
}


RECOVERY_WORDS = {
    "awaiting_restart": "waiting for the job to be restarted",
    "restarted": "restarted, not yet restored from a checkpoint",
    "restored": "restored from a checkpoint, no progress yet",
    "progress_resumed": "making progress again, not yet past the failure point",
    "verified": "recovered: progress passed the failure point",
}


def recovery_words(state: str, step: int | None = None) -> str:
    if state == "restored" and step is not None:
        return f"restored from the step-{step} checkpoint, no progress yet"
    return RECOVERY_WORDS.get(state, "no job to recover")


@dataclass(frozen=True)
class Links:
    api: str = "http://localhost:8080"
    grafana: str = "http://localhost:3000"


def as_of(log: Sequence[IncidentEvent], until: datetime) -> Incident | None:
    """The incident folded from the events up to `until` (the whole log when none is)."""
    known = [e for e in log if e.time <= until] or list(log)
    return next(iter(fold(known).values()), None)


def _scrub(inc: Incident, projects: Sequence[str]) -> Any:
    from jobtrail.views.incident import HIDDEN

    mine = set(projects)
    foreign = sorted({k for j in inc.jobs.values() if mine and j.project not in mine
                      for k in (j.key, f"{j.project}/{j.job_id}")}, key=len, reverse=True)

    def scrub(text: str) -> str:
        for key in foreign:
            text = text.replace(key, HIDDEN)
        return redact_text(text)

    return scrub


def message(sub: Subscription, d: Decision, log: Sequence[IncidentEvent],
            links: Links = Links(), *, transitions: Sequence[Decision] = ()) -> dict[str, Any]:
    """The message for decision `d` (and, for a digest, the other decisions it carries)."""
    inc = as_of(log, d.not_before)
    if inc is None:
        raise ValueError(f"no incident log for {d.incident_id}")
    scrub = _scrub(inc, sub.projects)
    mine = set(sub.projects)
    jobs = sorted((j for j in inc.jobs.values() if not mine or j.project in mine),
                  key=lambda j: j.key)
    kind = "first" if d.key == "first" else d.transition
    headline = HEADLINES.get(kind, kind).format(
        severity=inc.severity, klass=inc.klass, entity=scrub(inc.entity), owner=inc.owner,
        why=scrub(inc.severity_why or "no reason recorded"))
    recovery = recovery_of(jobs)
    first_job = next((j for j in jobs if j.role == "failed"), jobs[0] if jobs else None)
    timeline = job_timeline(links.grafana, inc, first_job, d.not_before)
    failed = [j for j in jobs if j.role == "failed"]
    lost = round(sum(j.lost_gpu_hours for j in jobs), 2)
    assessed = lost > 0 or recovery == "verified"
    at_risk = round(sum(j.gpus * max(0.0, (d.not_before - j.last_checkpoint_at)
                                     .total_seconds()) / 3600 for j in failed
                        if j.last_checkpoint_at), 2) if not assessed else 0.0
    restored = next((j.restored_step for j in failed if j.restored_step is not None), None)
    acked = inc.story.get(inc.stamps.get("acknowledged_at", "")) \
        if inc.acknowledged_at else None
    proposals = sorted((a for a in inc.actions.values() if a.status in ("proposed", "open")),
                       key=lambda a: (a.status != "open", a.action_id))[:2]
    return {
        "id": d.id,
        "type": f"incident.{kind}",
        "subscription": {"id": sub.id, "name": sub.name, "owner": sub.owner},
        "transition": d.transition,
        "folded": list(d.folded),
        "headline": f"[{inc.severity}] {scrub(inc.title or inc.klass)}: {headline}",
        "time": d.time.isoformat(),
        "incident": {
            "id": inc.id, "title": scrub(inc.title), "status": inc.status,
            "severity": inc.severity, "severity_why": scrub(inc.severity_why),
            "class": inc.klass, "entity": scrub(inc.entity),
            "owner": inc.owner, "owner_why": scrub(inc.owner_why),
            "cause": {"class": inc.cause_class, "entity": scrub(inc.cause_entity),
                      "confidence": round(inc.confidence, 2),
                      "explanation": scrub(inc.explanation)},
            "opened_at": inc.opened_at.isoformat() if inc.opened_at else None,
            "acknowledged": inc.acknowledged_at is not None,
            "acknowledged_by": scrub(acked.by) if acked else "",
            "acknowledged_at": acked.at.isoformat() if acked else None,
            "what": scrub(_what(inc, mine)),
            "impact": {"jobs": len(jobs), "gpus": sum(j.gpus for j in jobs),
                       "lost_gpu_hours": lost, "assessed": assessed,
                       "at_risk_gpu_hours": at_risk,
                       "lost_steps": sum(j.lost_steps for j in jobs),
                       "other_projects": len({j.project for j in inc.jobs.values()} - mine)
                       if mine else 0},
            "recovery": recovery,
            "recovery_words": recovery_words(recovery, restored) if jobs else
            "no job hit so far",
            "jobs": [f"{j.project}/{j.job_id}/{j.attempt}" for j in jobs[:20]],
            "actions": [{"id": a.action_id, "title": scrub(a.title), "status": a.status,
                         "command": (f"jobtrail incident action-accept {inc.id} {a.action_id}"
                                     if a.status == "proposed" else
                                     f"jobtrail incident action-done {inc.id} {a.action_id}")}
                        for a in proposals],
            "ack_command": f"jobtrail incident ack {inc.id}",
        },
        "links": {
            "incident": incident_dashboard(links.grafana, inc),
            "api": f"{links.api}/v1/incidents/{quote(inc.id)}",
            "timeline": timeline,
        },
        "digest": [{"incident": t.incident_id, "transition": t.transition,
                    "time": t.time.isoformat()} for t in transitions],
    }


def incident_dashboard(grafana: str, inc: Incident) -> str:
    """The incident's page in Grafana (the jobtrail-incident dashboard)."""
    return f"{grafana}/d/jobtrail-incident?var-incident={quote(inc.id)}"


def job_timeline(grafana: str, inc: Incident, job: Any, until: datetime | None) -> str:
    """The job dashboard at `job`'s attempt and the incident's time range (up to `until`,
    or the job's failure); '' without a job. Messages and the postmortem page link it."""
    if job is None:
        return ""
    end = until or job.failed_at
    return (f"{grafana}/d/jobtrail-job?var-project={quote(job.project)}"
            f"&var-job={quote(job.job_id)}&var-attempt={job.attempt}"
            + (_range(inc, job, end) if end else ""))


def _range(inc: Incident, job: Any, until: datetime) -> str:
    """Grafana's time range: from a few minutes before the first signal (or the checkpoint
    the loss counts from) to a few minutes after the message, in epoch ms."""
    from datetime import timedelta

    starts = [t for t in (inc.first_signal_at, job.last_checkpoint_at) if t is not None]
    if not starts:
        return ""
    start = min(starts) - timedelta(minutes=5)
    end = max(until, job.failed_at or until) + timedelta(minutes=5)
    return f"&from={int(start.timestamp() * 1000)}&to={int(end.timestamp() * 1000)}"


def _what(inc: Incident, mine: set[str]) -> str:
    """What broke, in words (the postmortem's plain summary); only the cause when the
    incident also hit jobs the subscriber may not see."""
    from processors.postmortem import story

    if mine and any(j.project not in mine for j in inc.jobs.values()):
        return story.cause_phrase(inc)[1].replace("\\", "") + "."
    return story.summary(inc).replace("\\", "")


def _impact_line(inc: dict[str, Any]) -> str:
    impact = inc["impact"]
    line = f"Impact: {impact['jobs']} job(s), {impact['gpus']} GPUs"
    if impact.get("assessed", True):
        line += f", {impact['lost_gpu_hours']} GPU-hours lost"
    elif impact.get("at_risk_gpu_hours"):
        line += (f"; at risk {impact['at_risk_gpu_hours']} GPU-hours (GPUs x time since the "
                 "last checkpoint; the loss is assessed when progress resumes)")
    return line + (f" (and jobs of {impact['other_projects']} other project(s))"
                   if impact["other_projects"] else "")


def acknowledgement(inc: dict[str, Any]) -> str:
    """Who acknowledged the incident and when, in words ('' when nobody has)."""
    if not inc.get("acknowledged_by"):
        return ""
    at = datetime.fromisoformat(inc["acknowledged_at"]) if inc.get("acknowledged_at") else None
    return f"by {inc['acknowledged_by']}" + (f" at {at:%Y-%m-%d %H:%M} UTC" if at else "")


def text(msg: dict[str, Any]) -> str:
    """The plain-text body every channel starts from."""
    inc = msg["incident"]
    impact = inc["impact"]
    cause = inc["cause"]
    del impact
    lines = [msg["headline"]]
    if inc.get("what"):
        lines.append(f"What happened: {inc['what']}")
    lines += [f"Cause: {cause['class'] or inc['class']} on {cause['entity'] or inc['entity']}"
              f" ({cause['confidence']:.2f}): {cause['explanation']}".rstrip(": "),
              f"Owner: {inc['owner']} ({inc['owner_why']})" if inc["owner_why"]
              else f"Owner: {inc['owner']}",
              _impact_line(inc),
              f"Recovery: {inc.get('recovery_words') or inc['recovery'] or 'n/a'}; "
              f"status {inc['status']}"]
    if inc.get("acknowledged_by"):
        lines.append(f"Acknowledged: {acknowledgement(inc)}")
    lines += [f"Proposed: {a['title']} ({a['command']})" for a in inc.get("actions", [])]
    if msg["links"].get("ack"):
        lines.append(f"Acknowledge: {msg['links']['ack']} (or {inc['ack_command']})")
    elif inc["status"] == "open" and inc.get("ack_command"):
        lines.append(f"Acknowledge: {inc['ack_command']}")
    lines.append(f"Incident: {msg['links']['incident']}")
    if msg["links"]["timeline"]:
        lines.append(f"Job timeline: {msg['links']['timeline']}")
    if msg["digest"]:
        lines.append(f"{len(msg['digest'])} change(s) in this digest:")
        lines += [f"- {t['time']} {t['incident']} {t['transition']}" for t in msg["digest"]]
    return "\n".join(lines)
