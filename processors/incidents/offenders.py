"""Repeat offenders: a node behind `repeat_offender_count` failures within the window gets a
standing incident (`lemon:<node>`, owned as the `repeat_offender` class says) that links the
incidents and their jobs.

A failure is an incident on the node, or each attempt that failed of it: a job that crashes
three times on one GPU is one incident (grouped, a repeat) and three failures towards the
verdict."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from processors.incidents import actions
from processors.incidents.book import akey, jobref, title
from processors.incidents.model import incident_id
from schemas import incident_events as ev

if TYPE_CHECKING:
    from processors.incidents.context import Context

RULE = "repeat-offender"


def failure(ctx: Context, node: str, inc_id: str, attempt: str, time: datetime) -> None:
    """An attempt failed of a node-grouped incident."""
    check(ctx, node, inc_id, time, f"{inc_id}/{attempt}")


def check(ctx: Context, node: str, inc_id: str, time: datetime, token: str = "") -> None:
    book = ctx.book
    seen = book.node_incidents.setdefault(node, {})
    seen[token or inc_id] = time
    horizon = time - timedelta(seconds=ctx.rules.repeat_offender_window_s)
    known = book.incidents.knows
    tokens = {t: at for t, at in seen.items() if at >= horizon and known(t.split("/", 1)[0])}
    with_failures = {t.split("/", 1)[0] for t in tokens if "/" in t}
    failures = sum(1 for t in tokens if "/" in t or t not in with_failures)
    if failures < ctx.rules.repeat_offender_count:
        return
    incidents: dict[str, datetime] = {}
    for t, at in tokens.items():
        incident = t.split("/", 1)[0]
        incidents[incident] = min(at, incidents.get(incident, at))
    recent = sorted((at, i) for i, at in incidents.items())
    key = f"lemon:{node}"
    standing = book.open.get(key)
    if standing is None:
        first = book.incidents[recent[0][1]]
        standing = incident_id(key, first.id)
        book.emit(standing, ev.IncidentOpened(key=key, klass="repeat_offender", entity=node,
                                              title=title(f"repeat offender: {node}",
                                                          book.cluster),
                                              first_signal_at=recent[0][0],
                                              cluster=book.cluster),
                  time, RULE, "opened")
        book.open[key] = standing
        entry = ctx.rules.klass("repeat_offender")
        book.emit(standing, ev.OwnerAssigned(
            team=entry.team, rule=RULE,
            why=f"{node} is behind {failures} failures: {entry.why or entry.team}"),
                  time, RULE, "owner")
        book.emit(standing, ev.CauseUpdated(
            klass="repeat_offender", entity=node, confidence=0.8,
            explanation=f"{node} is the faulty entity of {failures} failures "
                        f"({len(recent)} incidents) within "
                        f"{ctx.rules.repeat_offender_window_s / 86400:.0f} days; each is linked "
                        "here."), time, RULE, "cause")

        actions.propose(ctx, standing, time, None, RULE)
    for _, linked in recent:
        book.emit(standing, ev.SignalAdded(linked=linked), time, RULE, f"link:{linked}")
        for impact in book.incidents[linked].jobs.values():
            ref = (impact.project, impact.job_id, impact.attempt)
            if akey(ref) not in book.incidents[standing].jobs:
                book.emit(standing, ev.JobImpacted(job=jobref(ref), gpus=impact.gpus,
                                                   role="linked"),
                          time, RULE, f"{linked}:{impact.key}")
