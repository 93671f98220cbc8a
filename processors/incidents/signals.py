"""A signal joins an incident: counted and attached as evidence, or, past the incident's
`max_signal_evidence`, only counted (a sustained condition does not grow its incident
without bound)."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from processors.incidents import severity
from processors.incidents.book import Signal
from schemas import incident_events as ev

if TYPE_CHECKING:
    from processors.incidents.context import Context

def join(ctx: Context, inc_id: str, signal: Signal) -> None:
    event, rule = signal.event, signal.rule
    inc = ctx.book.incidents[inc_id]
    if event.id in inc.evidence:
        return  # counted already (a plain count's id is not kept in `applied`)
    if inc.signals >= ctx.rules.max_signal_evidence:
        fold(ctx, inc_id, signal)
        return
    repeat = bool(inc.jobs) and any(j.restarted_attempt is not None for j in inc.jobs.values())
    payload = ev.SignalAdded(event_id=event.id, rule=rule.name, flag="repeat") if repeat \
        else ev.SignalAdded(event_id=event.id, rule=rule.name)
    ctx.book.emit(inc_id, payload, event.time, rule.name, event.id)
    ctx.book.evidence(inc_id, event, "signal", rule.why or rule.klass, rule.name)
    if repeat:
        severity.assess(ctx, inc_id, event.time, rule.name)


def fold(ctx: Context, inc_id: str, signal: Signal) -> None:
    """A signal past the incident's `max_signal_evidence`: counted, and logged only as one
    `signal_added` (with the count) per quarter of the group window, which keeps the
    incident open for as long as the condition lasts."""
    book, event = ctx.book, signal.event
    folded = book.folded.get(inc_id, 0) + 1
    last = book.incidents[inc_id].last_signal_at
    if last is not None and event.time - last < timedelta(seconds=ctx.rules.group_window_s / 4):
        book.folded[inc_id] = folded
        return
    book.folded.pop(inc_id, None)
    book.emit(inc_id, ev.SignalAdded(event_id=event.id, rule=signal.rule.name, count=folded),
              event.time, signal.rule.name, event.id)

