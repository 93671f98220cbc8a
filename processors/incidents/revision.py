"""The detector's conclusion about an incident as one `diagnosis_revised` payload: what late
evidence (`lateness`) or a better-explaining entity (`correlate`) writes to the log when the
answer changed."""

from __future__ import annotations

from dataclasses import asdict

from processors.incidents.model import Incident
from schemas import incident_events as ev


def revision(inc: Incident, why: str) -> ev.DiagnosisRevised:
    """The detector's conclusion about `inc`, as one payload."""
    proposed = [asdict(a) for a in inc.actions.values() if a.status == "proposed"]
    return ev.DiagnosisRevised.model_validate({
        "why": why, "key": inc.key, "class": inc.klass, "entity": inc.entity,
        "title": inc.title, "cause_class": inc.cause_class, "cause_entity": inc.cause_entity,
        "cause_event": inc.cause_event, "cause_source": inc.cause_source,
        "cause_rank": inc.cause_rank, "confidence": inc.confidence,
        "explanation": inc.explanation, "severity": inc.severity,
        "severity_why": inc.severity_why, "owner": inc.owner, "owner_rule": inc.owner_rule,
        "owner_why": inc.owner_why, "first_signal_at": inc.first_signal_at,
        "last_signal_at": inc.last_signal_at, "signals": inc.signals,
        "flags": sorted(inc.flags), "charged_gpu_hours": inc.charged_gpu_hours,
        "linked": list(inc.linked), "jobs": [asdict(j) for j in inc.jobs.values()],
        "evidence": [asdict(e) for e in inc.evidence.values()], "proposed": proposed})
