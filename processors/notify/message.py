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
    "severity_raised": "severity raised to {severity}",
    "owner_changed": "now owned by {owner}", "mitigated": "mitigated",
    "recovery_verified": "recovery verified", "recovery_failed": "no restart: recovery failed",
    "resolved": "resolved", "reopened": "reopened",
    "postmortem_published": "postmortem published", "repeat": "still unacknowledged",
    "postmortem_due": "postmortem due", "followup_overdue": "a follow-up is overdue",
}


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
        severity=inc.severity, klass=inc.klass, entity=scrub(inc.entity), owner=inc.owner)
    recovery = recovery_of(jobs)
    first_job = jobs[0] if jobs else None
    timeline = (f"{links.grafana}/d/jobtrail-job?var-project={quote(first_job.project)}"
                f"&var-job={quote(first_job.job_id)}" if first_job else "")
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
            "impact": {"jobs": len(jobs), "gpus": sum(j.gpus for j in jobs),
                       "lost_gpu_hours": round(sum(j.lost_gpu_hours for j in jobs), 2),
                       "lost_steps": sum(j.lost_steps for j in jobs),
                       "other_projects": len({j.project for j in inc.jobs.values()} - mine)
                       if mine else 0},
            "recovery": recovery,
            "jobs": [f"{j.project}/{j.job_id}/{j.attempt}" for j in jobs[:20]],
        },
        "links": {
            "incident": f"{links.grafana}/d/jobtrail-incident?var-incident={quote(inc.id)}",
            "api": f"{links.api}/v1/incidents/{quote(inc.id)}",
            "timeline": timeline,
        },
        "digest": [{"incident": t.incident_id, "transition": t.transition,
                    "time": t.time.isoformat()} for t in transitions],
    }


def text(msg: dict[str, Any]) -> str:
    """The plain-text body every channel starts from."""
    inc = msg["incident"]
    impact = inc["impact"]
    cause = inc["cause"]
    lines = [msg["headline"],
             f"Cause: {cause['class'] or inc['class']} on {cause['entity'] or inc['entity']}"
             f" ({cause['confidence']:.2f}): {cause['explanation']}".rstrip(": "),
             f"Owner: {inc['owner']} ({inc['owner_why']})" if inc["owner_why"]
             else f"Owner: {inc['owner']}",
             f"Impact: {impact['jobs']} job(s), {impact['gpus']} GPUs, "
             f"{impact['lost_gpu_hours']} GPU-hours lost"
             + (f" (and jobs of {impact['other_projects']} other project(s))"
                if impact["other_projects"] else ""),
             f"Recovery: {inc['recovery'] or 'n/a'}; status {inc['status']}",
             f"Incident: {msg['links']['incident']}"]
    if msg["links"]["timeline"]:
        lines.append(f"Job timeline: {msg['links']['timeline']}")
    if msg["digest"]:
        lines.append(f"{len(msg['digest'])} change(s) in this digest:")
        lines += [f"- {t['time']} {t['incident']} {t['transition']}" for t in msg["digest"]]
    return "\n".join(lines)
