"""Repeat offenders: a node behind `repeat_offender_count` incidents within the window gets
a standing incident (`lemon:<node>`, hardware ops) that links them and their jobs."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from processors.incidents.book import akey, jobref
from processors.incidents.model import incident_id
from schemas import incident_events as ev

if TYPE_CHECKING:
    from processors.incidents.detector import Detector

RULE = "repeat-offender"


def check(d: Detector, node: str, inc_id: str, time: datetime) -> None:
    book = d.book
    seen = book.node_incidents.setdefault(node, {})
    seen[inc_id] = time
    horizon = time - timedelta(seconds=d.rules.repeat_offender_window_s)
    recent = sorted((t, i) for i, t in seen.items() if t >= horizon)
    if len(recent) < d.rules.repeat_offender_count:
        return
    key = f"lemon:{node}"
    standing = book.open.get(key)
    if standing is None:
        first = book.incidents[recent[0][1]]
        standing = incident_id(key, first.id)
        book.emit(standing, ev.IncidentOpened(key=key, klass="repeat_offender", entity=node,
                                              title=f"repeat offender: {node}",
                                              first_signal_at=recent[0][0]),
                  time, RULE, "opened")
        book.open[key] = standing
        entry = d.rules.klass("repeat_offender")
        book.emit(standing, ev.OwnerAssigned(
            team=entry.team, rule=RULE,
            why=f"{node} is behind {len(recent)} incidents: hardware ops decide whether to "
                "replace it"), time, RULE, "owner")
        book.emit(standing, ev.CauseUpdated(
            klass="repeat_offender", entity=node, confidence=0.8,
            explanation=f"{node} is the faulty entity of {len(recent)} incidents within "
                        f"{d.rules.repeat_offender_window_s / 86400:.0f} days; each is linked "
                        "here."), time, RULE, "cause")
    for _, linked in recent:
        book.emit(standing, ev.SignalAdded(linked=linked), time, RULE, f"link:{linked}")
        for impact in book.incidents[linked].jobs.values():
            ref = (impact.project, impact.job_id, impact.attempt)
            if akey(ref) not in book.incidents[standing].jobs:
                book.emit(standing, ev.JobImpacted(job=jobref(ref), gpus=impact.gpus,
                                                   role="linked"),
                          time, RULE, f"{linked}:{impact.key}")
