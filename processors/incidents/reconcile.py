"""The difference a re-evaluation found, written to the incident log (part of the lateness
concern, `processors/incidents/lateness.py`, which calls `reconcile` after a replay): the
incidents already opened are revised (`diagnosis_revised`) to the time-ordered events'
conclusions, a replayed incident that holds an open one's attempts takes its id, and one the
time-ordered events do not give is withdrawn into the incident that now holds its attempts.

Pure: no clock, ids derived from the late event and the incident's sequence.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from processors.incidents.book import Book
from processors.incidents.model import (
    Incident,
    IncidentEvent,
    InvalidTransition,
    apply,
    new_event,
)
from processors.incidents.rename import rename
from processors.incidents.revision import revision
from schemas import incident_events as ev
from schemas.events import Event

RULE = "lateness"
"""The rule the incident log names as the actor of what a re-evaluation writes."""


def _active_jobs(inc: Incident) -> set[str]:
    return {k for k, j in inc.jobs.items() if j.role in ("failed", "degraded")}


def _conclusion(inc: Incident) -> tuple[Any, ...]:
    """What `revision` carries, to compare (a person's owner is not the detector's)."""
    owner = () if inc.owner_rule == "manual" else (inc.owner, inc.owner_rule, inc.owner_why)
    return (inc.key, inc.klass, inc.entity, inc.title, inc.cause_class, inc.cause_entity,
            inc.cause_event, inc.cause_source, inc.cause_rank, inc.confidence,
            inc.explanation, inc.severity, inc.severity_why, owner, inc.first_signal_at,
            inc.last_signal_at, inc.signals, sorted(inc.flags), inc.charged_gpu_hours,
            inc.linked, inc.jobs, inc.evidence)


def _write(live: Book, inc_id: str, payload: ev.Payload, time: datetime,
           discriminator: str) -> IncidentEvent | None:
    state = live.incidents[inc_id]
    try:
        event = new_event(state, inc_id, payload, time, _actor(), discriminator)
    except InvalidTransition:
        live.refused += 1
        return None
    live.incidents[inc_id] = apply(state, event)
    return event


def _actor() -> Any:
    from processors.incidents.book import actor

    return actor(RULE)


def reconcile(live: Book, rebuilt: Book, replay: list[IncidentEvent], touched: set[str],
              late: Event) -> tuple[list[IncidentEvent], dict[str, str]]:
    """Bring the log to the rebuilt memory's conclusions; `rebuilt` becomes the detector's
    memory (renamed onto the incidents already opened, with what people did kept). Returns
    the events to append and the renaming (replay id -> the id in the log)."""
    out: list[IncidentEvent] = []
    why = (f"{late.type} {late.id} at {late.time.isoformat()} arrived after later events; "
           "the events in time order give this conclusion")
    by_incident: dict[str, list[IncidentEvent]] = {}
    for e in replay:
        by_incident.setdefault(e.incident_id, []).append(e)
    orphans = sorted((i for i, inc in live.incidents.items()
                      if i not in rebuilt.incidents and not inc.withdrawn),
                     key=lambda i: (live.incidents[i].opened_at or late.time, i))
    new = sorted((i for i in rebuilt.incidents if i not in live.incidents),
                 key=lambda i: (rebuilt.incidents[i].opened_at or late.time, i))
    renamed: dict[str, str] = {}
    for inc_id in new:
        inc = rebuilt.incidents[inc_id]
        match = next((o for o in orphans if o not in renamed.values() and (
            live.incidents[o].key == inc.key
            or _active_jobs(live.incidents[o]) & _active_jobs(inc))), None)
        if match is None:
            for e in by_incident.get(inc_id, []):  # a new incident: its log as replayed
                live.incidents[inc_id] = apply(live.incidents.get(inc_id), e)
                out.append(e)
            continue
        renamed[inc_id] = match
    rename(rebuilt, renamed)
    for inc_id in sorted(touched | set(by_incident) | set(renamed.values())):
        if inc_id not in rebuilt.incidents or inc_id not in live.incidents:
            continue
        now, was = rebuilt.incidents[inc_id], live.incidents[inc_id]
        if (now.withdrawn and was.withdrawn) or (
                not now.withdrawn and not was.withdrawn and _conclusion(now) == _conclusion(was)):
            continue
        if now.withdrawn:  # the replay moved its attempts into another incident
            payload: ev.Payload = _withdrawal(why, renamed.get(now.merged_into,
                                                                now.merged_into))
        else:
            payload = revision(now, why)
        event = _write(live, inc_id, payload, late.time, f"revised:{late.id}:{was.seq}")
        if event is not None:
            out.append(event)
    for inc_id in orphans:
        if inc_id in renamed.values() or live.incidents[inc_id].withdrawn:
            continue
        was = live.incidents[inc_id]
        target = next((i for i in sorted(rebuilt.incidents)
                       if _active_jobs(rebuilt.incidents[i]) & _active_jobs(was)), "")
        event = _write(live, inc_id, _withdrawal(why, target), late.time, f"merged:{late.id}")
        if event is not None:
            out.append(event)
    for inc_id, inc in live.incidents.items():
        mine = rebuilt.incidents.get(inc_id)
        if mine is None and not inc.withdrawn:
            continue  # pragma: no cover - every live incident is rebuilt or withdrawn
        if mine is not None and mine is not inc:
            inc.applied |= mine.applied  # decisions the replay took are taken
        rebuilt.incidents[inc_id] = inc  # with what people did; withdrawn ones stay known
    rebuilt.opened_observed = {**live.opened_observed, **rebuilt.opened_observed}
    return out, renamed


def _withdrawal(why: str, target: str) -> ev.DiagnosisRevised:
    """Withdraw an incident the time-ordered events do not give: into `target`, the one
    that now holds its attempts, or as not an incident."""
    return ev.DiagnosisRevised(why=why + (f": its attempts belong to {target}" if target else
                                          ": it is not an incident"), merged_into=target)
