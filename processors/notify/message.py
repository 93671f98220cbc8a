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
from processors.notify.words import acknowledgement, push, text

__all__ = ["HEADLINES", "Links", "acknowledgement", "as_of", "incident_dashboard",
           "job_timeline", "message", "recovery_words", "text"]

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
            links: Links = Links(), *, transitions: Sequence[Decision] = (),
            now: datetime | None = None, seen: datetime | None = None) -> dict[str, Any]:
    """The message for decision `d` (and, for a digest, the other decisions it carries),
    made at `now` (default: when it may go out) for an incident jobtrail first recorded at
    `seen` (None: not known)."""
    inc = as_of(log, d.not_before)
    if inc is None:
        raise ValueError(f"no incident log for {d.incident_id}")
    made = (now or d.not_before).replace(microsecond=0)  # a retry (ms in store) says the same
    scrub = _scrub(inc, sub.projects)
    mine = set(sub.projects)
    jobs = sorted((j for j in inc.jobs.values() if not mine or j.project in mine),
                  key=lambda j: (j.role != "failed", j.key))
    kind = "first" if d.key == "first" else d.transition
    resolved = _told(inc, "resolved")
    mitigated = _told(inc, "mitigated")
    headline = HEADLINES.get(kind, kind).format(
        severity=inc.severity, klass=inc.klass, entity=scrub(inc.entity), owner=inc.owner,
        why=scrub(inc.severity_why or "no reason recorded"))
    if kind == "resolved" and resolved is not None:
        headline = f"resolved by {scrub(resolved.by)}"
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
    msg: dict[str, Any] = {
        "id": d.id,
        "type": f"incident.{kind}",
        "subscription": {"id": sub.id, "name": sub.name, "owner": sub.owner},
        "transition": d.transition,
        "folded": list(d.folded),
        "headline": f"[{inc.severity}] {scrub(inc.title or inc.klass)}: {headline}",
        "time": d.time.isoformat(),
        "made_at": made.isoformat(),
        "age_s": max(0, int((made - d.time).total_seconds())),
        "incident": {
            "id": inc.id, "title": scrub(inc.title), "status": inc.status,
            "severity": inc.severity, "severity_why": scrub(inc.severity_why),
            "class": inc.klass, "entity": scrub(inc.entity),
            "owner": inc.owner, "owner_why": scrub(inc.owner_why),
            "cause": {"class": inc.cause_class, "entity": scrub(inc.cause_entity),
                      "confidence": round(inc.confidence, 2),
                      "explanation": scrub(inc.explanation)},
            "opened_at": inc.opened_at.isoformat() if inc.opened_at else None,
            "first_signal_at": inc.first_signal_at.isoformat() if inc.first_signal_at
            else None,
            "seen_at": seen.isoformat() if seen else None,
            "acknowledged": inc.acknowledged_at is not None,
            "acknowledged_by": scrub(acked.by) if acked else "",
            "acknowledged_at": acked.at.isoformat() if acked else None,
            "mitigated_by": scrub(mitigated.by) if mitigated else "",
            "mitigated_at": mitigated.at.isoformat() if mitigated else None,
            "mitigation": scrub(mitigated.text) if mitigated else "",
            "resolved_by": scrub(resolved.by) if resolved else "",
            "resolved_at": resolved.at.isoformat() if resolved else None,
            "resolution": scrub(resolved.text) if resolved else "",
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
            "job_impacts": [{"job": f"{j.project}/{j.job_id}", "attempt": j.attempt,
                             "role": j.role, "gpus": j.gpus,
                             "failed_at": j.failed_at.isoformat() if j.failed_at else None,
                             "failure_step": j.failure_step,
                             "recovery": recovery_words(j.recovery, j.restored_step)}
                            for j in jobs[:20]],
            "nodes": _nodes(inc, mine)[:20],
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
    msg["push"] = push(msg)
    return msg


def _told(inc: Incident, kind: str) -> Any:
    """The latest thing people did of `kind` (who, when, what they said), or None."""
    told = [t for t in inc.story.values() if t.kind == kind]
    return max(told, key=lambda t: (t.at, t.event_id)) if told else None


def _nodes(inc: Incident, mine: set[str]) -> list[str]:
    """The nodes the incident's evidence names (a node's own events: an Xid, a drain),
    those of the subscriber's projects' jobs only when it is bound to some."""
    found = {e.entity.split("/", 1)[0] for e in inc.evidence.values()
             if e.source == "node" and e.entity and (not mine or not e.project
                                                     or e.project in mine)}
    return sorted(found, key=lambda n: (len(n), n))


def incident_dashboard(grafana: str, inc: Incident | str) -> str:
    """The incident's page in Grafana (the jobtrail-incident dashboard); every link to it is
    built here."""
    incident_id = inc if isinstance(inc, str) else inc.id
    return f"{grafana}/d/jobtrail-incident?var-incident={quote(incident_id)}"


def job_timeline(grafana: str, inc: Incident | Any, job: Any, until: datetime | None) -> str:
    """The job dashboard at `job`'s attempt and the incident's time range (up to `until`,
    or the job's failure); '' without a job. Messages, the postmortem page and `incident
    show` link it (`inc` needs only `first_signal_at`; `job` project, job_id, attempt,
    failed_at, last_checkpoint_at)."""
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


