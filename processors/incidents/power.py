"""What a fault takes with it: a node that lost power takes its ports down, stops answering
the scheduler and is drained. The power loss (`node.power` `state: off`, from the BMC) is the
cause; those are its consequences, not faults of their own.

A power-off opens a window on the node (`power_window_s`). Inside it, a network signal on one
of the node's ports (its NIC's own `port_down`, or the switch port it is cabled to, by the
topology at that time) and a node failure (not responding, drained, rebooted) become a
consequence of the power loss: remembered under the node's key with no weight of their own
(so the weighing sees one candidate, the power loss), never counted towards a threshold
(no network incident for two ports of a dead node), and attached to the power incident as
`consequence` evidence. A power loss on another node, or a port that is not the node's, is
unchanged.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from processors.incidents.book import Signal
from processors.incidents.rules import SignalRule
from processors.timeline import event_node, event_switch
from schemas import incident_events as ev
from schemas.events import Event

if TYPE_CHECKING:
    from processors.incidents.context import Context

KLASS = "node_power"
RULE = "power-consequence"
_TAKEN = frozenset({"network", "node_failure"})
"""Classes whose signals on a node that lost power are the power loss's consequences."""
_NEVER = 10**9
_EARLY_S = 5.0
"""A consequence stamped this much before the BMC's record (clocks of a switch, a BMC and the
controller disagree by a few seconds) is still the power loss's."""


def node_of(ctx: Context, event: Event) -> str:
    """The node an event is about: its own, or the node cabled to the switch port it names."""
    node = event_node(event)
    if node:
        return node
    switch, port = event_switch(event)
    if not switch or not port:
        return ""
    names = {port, f"p{port.removeprefix('p')}", port.removeprefix("p")}
    for link, _ in ctx.topology().under(switch, event.time):
        if link.switch == switch and link.port in names:
            return link.node
    return ""


def observe(ctx: Context, event: Event, signal: SignalRule | None) -> SignalRule | None:
    """The signal rule to use for `event`: a power-off opens the node's window; a network or
    node-failure signal on a node inside its window becomes a consequence; anything else is
    unchanged."""
    book = ctx.book
    if event.type == "node.power":
        node = event_node(event)
        if node and event.attributes.get("state") == "off" and signal is not None:
            until = event.time + timedelta(seconds=ctx.rules.power_window_s)
            current = book.powered.get(node)
            if current is None or current[1] < until:
                book.powered[node] = (event.time, until, event.id)
        return signal
    if signal is None or signal.klass not in _TAKEN:
        return signal
    node = node_of(ctx, event)
    window = book.powered.get(node) if node else None
    if window is None or not (window[0] - timedelta(seconds=_EARLY_S) <= event.time <= window[1]):
        return signal
    return SignalRule.model_validate({
        "name": RULE, "types": [event.type], "class": KLASS, "weight": 0,
        "why": f"{signal.why or signal.klass}, after {node} lost power",
        "threshold": {"count": _NEVER, "window_s": 0}})


def consequence(ctx: Context, event: Event, rule: SignalRule, signal: Signal) -> None:
    """Remember a consequence under the powered-off node's key and attach it to that node's
    open incident (the power loss opened one)."""
    book = ctx.book
    node = node_of(ctx, event)
    signal.key = f"node:{node}"
    book.signals.append(signal)
    inc_id = book.open.get(signal.key)
    if inc_id is None or not book.incidents[inc_id].active:
        return
    book.emit(inc_id, ev.SignalAdded(event_id=event.id, rule=rule.name,
                                     detail=f"consequence: {event.type} on "
                                     f"{event.entity or node}, after {node} lost power"),
              event.time, rule.name, event.id)
    book.evidence(inc_id, event, "consequence", rule.why, rule.name)


def forget(ctx: Context) -> None:
    """Power windows that ended are dropped."""
    book = ctx.book
    if book.watermark is None:
        return
    for node in [n for n, (_, until, _) in book.powered.items() if until < book.watermark]:
        del book.powered[node]
