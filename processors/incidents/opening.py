"""Opening an incident: logged, routed, rated, and counted against its node for the
repeat-offender rule."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from processors.incidents import offenders, routing, severity
from processors.incidents.book import NotInLog, node_of, title
from processors.incidents.model import incident_id
from schemas import incident_events as ev

if TYPE_CHECKING:
    from processors.incidents.context import Context


def open_incident(ctx: Context, key: str, klass: str, entity: str, first_id: str,
                  first_at: datetime, rule: str, time: datetime,
                  observed_at: datetime | None = None) -> str:
    """Open, route, rate; and count it against its node for the repeat-offender rule."""
    book = ctx.book
    inc_id = incident_id(key, first_id)
    book.emit(inc_id, ev.IncidentOpened(
        key=key, klass=klass, entity=entity,
        title=title(f"{klass.replace('_', ' ')} on {entity}", book.cluster),
        first_signal_at=first_at, first_event=first_id, cluster=book.cluster), time, rule,
        "opened")
    if inc_id not in book.incidents:
        raise NotInLog(inc_id)
    if observed_at is not None and not book.replaying:
        # when the signal reached us: for the latency metric, not part of the log (the
        # log is a function of the input alone)
        book.opened_observed[inc_id] = observed_at
    book.open[key] = inc_id
    routing.route(ctx, inc_id, time, rule)
    severity.assess(ctx, inc_id, time, rule)
    if ctx.rules.klass(klass).group == "node":
        node = node_of(entity)
        if node:
            offenders.check(ctx, node, inc_id, time)
    return inc_id
