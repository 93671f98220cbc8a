"""An incident log as the transitions a person would want to hear about (part of the
notification decision, `processors/notify/decide.py`, which filters, folds, holds and repeats
them per subscription): opened, cause changed, severity raised, owner changed, mitigated,
recovery verified or failed, resolved, reopened, postmortem published, each with the
incident's matcher labels before and after it.

Pure: the log folded event by event, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from processors.incidents.model import Incident, IncidentEvent, apply

SEVERITY_RANK = {"sev1": 1, "sev2": 2, "sev3": 3, "sev4": 4}
FOLDABLE = ("cause_changed", "owner_changed", "severity_raised")


@dataclass(frozen=True)
class Change:
    """A transition of one incident, with its labels before and after."""

    transition: str
    key: str
    seq: int
    time: datetime
    before: Mapping[str, tuple[str, ...]]
    after: Mapping[str, tuple[str, ...]]
    severity: str
    acknowledged_at: datetime | None
    mitigated_at: datetime | None
    resolved_at: datetime | None


def labels(inc: Incident, projects: Sequence[str] = ()) -> dict[str, tuple[str, ...]]:
    """The matcher labels of an incident, as a subscriber bound to `projects` may see it
    (() = everything)."""
    mine = set(projects)
    jobs = [j for j in inc.jobs.values() if not mine or j.project in mine]
    return {
        # the owner, and every team a follow-up is proposed or open for (a drained node
        # inside the network team's incident is hardware ops' to hear of)
        "team": (inc.owner, *sorted({a.owner for a in inc.actions.values()
                                     if a.status in ("proposed", "open") and a.owner
                                     and a.owner != inc.owner})),
        "class": (inc.klass,), "severity": (inc.severity,),
        "project": tuple(sorted({j.project for j in jobs})),
        "job": tuple(sorted({f"{j.project}/{j.job_id}" for j in jobs})),
        "entity": (inc.entity,), "cause_entity": (inc.cause_entity or inc.entity,),
        "rule": (inc.rule,), "status": (inc.status,),
        "scope": ("job" if inc.job_scoped else "entity",),
    }


@dataclass(frozen=True)
class Snapshot:
    time: datetime
    labels: Mapping[str, tuple[str, ...]]
    severity: str


def changes(log: Sequence[IncidentEvent], projects: Sequence[str] = (),
            snapshots: list[Snapshot] | None = None) -> list[Change]:
    """The transitions of one incident's log, in log order (and, into `snapshots`, its
    labels after every event)."""
    inc: Incident | None = None
    out: list[Change] = []
    verified: set[str] = set()
    if any(e.kind == "signal_added" and e.data.get("flag") == "drill" for e in log):
        return out  # a recovery drill pages nobody (its incident log still says everything)
    for event in sorted(log, key=lambda e: (e.seq, e.id)):
        before = labels(inc, projects) if inc is not None and inc.opened_at else {}
        old = (inc.klass, inc.cause_entity, inc.owner, inc.severity, inc.flags.copy()) \
            if inc is not None else ("", "", "", "", set())
        old_teams = set(before.get("team", ())) if before else set()
        inc = apply(inc, event)
        if snapshots is not None and inc.opened_at is not None:
            snapshots.append(Snapshot(event.time, labels(inc, projects), inc.severity))
        kind = event.kind
        found: list[tuple[str, str]] = []
        if kind == "opened":
            found.append(("opened", "opened"))
        elif kind == "cause_updated" and old[0:2] != (inc.klass, inc.cause_entity) \
                and old[1]:
            found.append(("cause_changed", f"cause-{event.seq}"))
        elif kind == "owner_assigned" and old[2] and old[2] != inc.owner:
            found.append(("owner_changed", f"owner-{event.seq}"))
        elif kind == "severity_changed" and SEVERITY_RANK.get(inc.severity, 9) < \
                SEVERITY_RANK.get(old[3], 9):
            found.append(("severity_raised", f"severity-{event.seq}"))
        elif kind == "diagnosis_revised":
            # late evidence revised the diagnosis (arrival order): the same transitions people
            # hear of when a cause, an owner or a severity changes one at a time
            if old[1] and old[0:2] != (inc.klass, inc.cause_entity):
                found.append(("cause_changed", f"cause-{event.seq}"))
            if old[2] and old[2] != inc.owner:
                found.append(("owner_changed", f"owner-{event.seq}"))
            if SEVERITY_RANK.get(inc.severity, 9) < SEVERITY_RANK.get(old[3], 9):
                found.append(("severity_raised", f"severity-{event.seq}"))
        elif kind in ("mitigated", "resolved", "reopened"):
            found.append((kind, f"{kind}-{event.seq}"))
        elif kind == "recovery_verified":
            job = event.data.get("job") or {}
            ref = f"{job.get('project')}/{job.get('job_id')}/{job.get('attempt')}"
            if ref not in verified:
                verified.add(ref)
                found.append(("recovery_verified", f"verified-{ref}"))
        elif kind == "signal_added" and "no_restart" in inc.flags - old[4]:
            found.append(("recovery_failed", f"no-restart-{event.seq}"))
        elif kind == "postmortem_published":
            found.append(("postmortem_published", f"postmortem-{event.seq}"))
        elif kind == "action_proposed" and event.data.get("owner") not in ("", inc.owner) \
                and event.data.get("owner") not in old_teams:
            # a follow-up for another team than the owner: that team hears of it
            found.append(("followup_proposed", f"followup-{event.data.get('owner')}"))
        if not found or inc.opened_at is None:
            continue
        after = labels(inc, projects)
        for transition, key in found:
            was, now = before or after, after
            if transition == "followup_proposed":  # told to the team it is for
                was = now = {**after, "team": (str(event.data.get("owner")),)}
            out.append(Change(transition, key, event.seq, event.time, was, now,
                              inc.severity, inc.acknowledged_at, inc.mitigated_at,
                              inc.resolved_at))
    return out
