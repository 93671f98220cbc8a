"""Changes applied before the attempt: an image, driver, NCCL or firmware rollout
(`change.applied`) on nodes an attempt later started on is a candidate cause of that
attempt's failures, and of every attempt that fails the same way on them after it.

A change is remembered twice. As planned work (`planned`), for the attempts running when it
was applied (the firmware flash and reboot that killed a running job). And here, as a
standing signal (`change_window_s`, 24 h by default), for the attempts that started on its
nodes after it: the pipeline's timeline gives them a `change` row (`timeline.change_rows`),
and the weighing weighs the change for their symptoms (specificity `change_weight`, one
candidate per change; it never outweighs a symptom that names another class unmistakably,
an OOM or an ECC error, unless that class is one a change can cause: `change_explains`).
Grouped by the change (its ticket, else kind and version), so the jobs that fail after it
are one incident owned by the change's owner (its `owner`/`team` attribute, else the class's
team), with the rollback proposed.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from processors.incidents.book import AttemptKey, Signal
from processors.incidents.rules import SignalRule
from processors.timeline import change_nodes
from schemas.events import Event

if TYPE_CHECKING:
    from processors.incidents.context import Context

KLASS = "change_regression"
RULE = "change-before-the-attempt"
PREFIX = "change:"
MAX_KEPT = 10_000
"""Standing changes remembered at most (the oldest leave first)."""


def key_of(event: Event) -> str:
    """One key per change: its ticket, else its kind and the version it installed."""
    attrs: dict[str, Any] = event.attributes
    if attrs.get("ticket"):
        return f"{PREFIX}{attrs['ticket']}"
    if attrs.get("after"):
        return f"{PREFIX}{attrs.get('kind') or 'change'} {attrs['after']}"
    return f"{PREFIX}{event.id}"


def name(signal: Signal) -> str:
    """What the change is called (its ticket, else kind and version), '' for other signals."""
    return signal.key[len(PREFIX):] if signal.rule.klass == KLASS else ""


def what(event: Event) -> str:
    """`nccl 2.19.3 -> 2.18.3` style: kind, before and after as the change says them."""
    attrs: dict[str, Any] = event.attributes
    kind = str(attrs.get("kind") or "change")
    before, after = attrs.get("before"), attrs.get("after")
    if before and after:
        return f"{kind} {before} -> {after}"
    return f"{kind} {after}" if after else kind


def owner(event: Event) -> str:
    """The change's owner, as the change says it ('' when it does not)."""
    for name_ in ("owner", "team"):
        value = event.attributes.get(name_)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return ""


def remember(ctx: Context, event: Event, reached: dict[AttemptKey, tuple[str, str]]) -> None:
    """A change applied to nodes: a standing signal for the attempts that start after it."""
    if not event.type.startswith("change.") or event.job_id or not change_nodes(event):
        return
    book = ctx.book
    if any(s.event.id == event.id for s in book.changes):
        return
    rule = SignalRule.model_validate({
        "name": RULE, "types": [event.type], "class": KLASS, "weight": ctx.rules.change_weight,
        "why": f"{what(event)} applied to the attempt's nodes before it started",
        "threshold": {"count": 10**9, "window_s": 0}})
    book.changes.append(Signal(event, rule, key_of(event), dict(reached)))
    while len(book.changes) > MAX_KEPT:
        book.changes.popleft()


def reaching(ctx: Context, key: AttemptKey, time: datetime,
             started: datetime | None) -> list[Signal]:
    """The standing changes that reached the attempt: applied to its nodes before it started,
    within `change_window_s` of the symptom. Read off the attempt's nodes when weighed (so
    whatever order the change and the attempt arrived in, and whatever checkpoint a
    re-evaluation started from), and recorded in the signal's reach."""
    attempt = ctx.book.attempt(key)
    if started is None or attempt is None or not attempt.nodes:
        return []
    since = time - timedelta(seconds=ctx.rules.change_window_s)
    mine = set(attempt.nodes)
    out = []
    for signal in ctx.book.changes:
        event = signal.event
        if not since <= event.time < started or (event.project and event.project != key[0]):
            continue  # a tenant's report of a change reaches only its own jobs
        shared = [n for n in change_nodes(event) if n in mine]
        if not shared:
            continue
        entity = event.entity or shared[0]
        signal.reach(key, ("change", f"{entity} → {shared[0]}" if entity != shared[0]
                           else shared[0]))
        out.append(signal)
    return out


def applies(signal: Signal, started: datetime | None) -> bool:
    """Whether a change signal concerns an attempt that started at `started`: the planned
    one (applied while it ran) or the standing one (applied before it started)."""
    if not signal.event.type.startswith("change."):
        return True
    before = started is not None and signal.event.time < started
    return before == (signal.rule.klass == KLASS)


def explanation(signal: Signal, key: str, started: datetime | None, time: datetime,
                what_failed: str, path: str) -> str:
    """Why a change before the attempt is its cause."""
    event = signal.event
    node = path.split(" → ")[-1] if path else ""
    ahead = f", {(started - event.time).total_seconds() / 60:.0f} min before {key} started " \
            f"on it" if started is not None else f", before {key} started on it"
    into = f" {(time - started).total_seconds() / 60:.0f} min in" if started is not None \
        else ""
    return (f"{name(signal)} ({what(event)}) was applied to {node or 'its nodes'} at "
            f"{event.time.isoformat()}{ahead}; the attempt failed{into} ({what_failed}) with "
            f"no fault signal that outweighs the change it ran under (path {path}). Every "
            "attempt that fails after it on its nodes joins this incident.")


def forget(ctx: Context) -> None:
    """Standing changes older than the change window behind the watermark are dropped."""
    book = ctx.book
    if book.watermark is None:
        return
    horizon = book.watermark - timedelta(seconds=ctx.rules.change_window_s)
    while book.changes and book.changes[0].event.time < horizon:
        book.changes.popleft()
