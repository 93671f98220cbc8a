"""An alert's resolution ends the signal it fired: one signal with a start and an end.

A resolved notification names the firing event it ends (`attributes.ends`, set by
ingest/alertmanager.py). On every active incident that holds that signal it is recorded as
`signal_ended` (the firing signal is not counted again, and nothing new opens). When every
signal an incident holds has ended, the condition is over: an incident still open or
acknowledged is `mitigated` by the processor, saying which alerts ended when, so a person's
resolve follows (recovery of its jobs is followed as before, whatever the status).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from schemas import incident_events as ev
from schemas.events import Event

if TYPE_CHECKING:
    from processors.incidents.context import Context

RULE = "alert-resolved"


def on_end(ctx: Context, event: Event) -> None:
    fired = event.attributes.get("ends")
    if not isinstance(fired, str) or not fired:
        return
    book = ctx.book
    for inc_id in sorted(set(book.open.values())):
        inc = book.incidents[inc_id]
        held = inc.evidence.get(fired)
        if held is None or fired in inc.ended or not inc.active:
            continue
        book.emit(inc_id, ev.SignalEnded(event_id=event.id, ends=fired, started_at=held.time,
                                         ended_at=event.time), event.time, RULE, event.id)
        inc = book.incidents[inc_id]
        signals = [e for e in inc.evidence.values() if e.role == "signal"]
        if inc.status not in ("open", "acknowledged") or not signals \
                or any(e.event_id not in inc.ended for e in signals):
            continue
        last = max(inc.ended[e.event_id] for e in signals)
        book.emit(inc_id, ev.Mitigated(
            text=f"every alert behind it resolved (the last at {last.isoformat()}; "
                 f"{len(signals)} signal{'s' if len(signals) > 1 else ''} ended): the "
                 "condition is over. Resolve it once its cause is fixed; a new firing "
                 "joins it again."), event.time, RULE, f"ended:{event.id}")
