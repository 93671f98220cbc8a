"""Planned work is not a fault.

A `change.*` on a node, and a drain whose reason names maintenance or a ticket (CHG-1234),
open a planned window on the node (`planned_window_s`); the node's drains and reboots
(`node_failure` signals: drained, not ready) inside it are planned too. Planned events are
remembered as signals of the `planned_change` class, which never opens an incident on its
own: no hardware incident, no repeat-offender count (the class is not node-grouped). A job
symptom in their fault domain finds them as its cause like any signal, so the change is
cited on every job it touched (owner platform, not the cluster's fault).
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from processors.incidents.rules import SignalRule
from processors.timeline import event_node
from schemas import patterns
from schemas.events import Event

if TYPE_CHECKING:
    from processors.incidents.context import Context

KLASS = "planned_change"
_REPLANNED = frozenset({"node_failure"})
"""Classes whose signals inside a planned window are the planned work itself."""
_FAULT_WORDS = re.compile(r"(?i)unexpect|fail|error|\bxid\b")
_NEVER = 10**9  # the threshold count of a planned signal: it never opens an incident alone


def _rule(why: str) -> SignalRule:
    return SignalRule.model_validate({"name": "planned-work", "types": ["change.applied"],
                                      "class": KLASS, "why": why,
                                      "threshold": {"count": _NEVER, "window_s": 0}})


def _citation(event: Event) -> str:
    attrs: dict[str, Any] = event.attributes
    parts = [str(attrs[k]) for k in ("ticket", "kind", "reason") if attrs.get(k)]
    return " ".join(dict.fromkeys(parts)) or event.message or event.type


def _nodes(event: Event) -> list[str]:
    nodes = attrs if isinstance(attrs := event.attributes.get("nodes"), list) else []
    node = event_node(event)
    return sorted({*(str(n) for n in nodes), *([node] if node else [])})


def maintenance(ctx: Context, event: Event) -> bool:
    """A drain for planned work: its reason names maintenance or a ticket, or it has one."""
    if event.type != "node.drained":
        return False
    attrs: dict[str, Any] = event.attributes
    reason = attrs.get("reason") if isinstance(attrs.get("reason"), str) else ""
    text = f"{reason} {event.message}"
    if attrs.get("xid") is not None or _FAULT_WORDS.search(text):
        return False
    return bool(attrs.get("ticket")) or patterns.search(ctx.rules.planned_reasons, text)


def observe(ctx: Context, event: Event, signal: SignalRule | None) -> SignalRule | None:
    """The signal rule to use for `event`: planned work becomes a `planned_change` signal
    (and opens or extends its node's planned window); anything else is unchanged."""
    book = ctx.book
    opens = event.type.startswith("change.") or maintenance(ctx, event)
    if opens:
        until = event.time + timedelta(seconds=ctx.rules.planned_window_s)
        for node in _nodes(event):
            current = book.planned.get(node)
            if current is None or current[0] < until:
                book.planned[node] = (until, _citation(event), event.id)
        if not _nodes(event) and not event.type.startswith("change."):
            return signal
        return _rule(f"planned work: {_citation(event)}")
    if signal is None or signal.klass not in _REPLANNED:
        return signal
    node = event_node(event)
    window = book.planned.get(node) if node else None
    if window is None or event.time > window[0]:
        return signal
    return _rule(f"{signal.why or signal.klass}, during planned work: {window[1]}")


def forget(ctx: Context) -> None:
    """Planned windows that ended are dropped."""
    book = ctx.book
    if book.watermark is None:
        return
    for node in [n for n, (until, _, _) in book.planned.items() if until < book.watermark]:
        del book.planned[node]
