"""Signals: remembered with the attempts they reached, grouped by the faulty entity.

A signal's grouping key follows its class (`classes.<name>.group` in the rules): `node:`,
`network:<switch>`, `storage:<filesystem>`, or the attempt. At the rule's threshold it opens
an incident on its own; a later signal on the key within `group_window_s` joins it; one
soon after the key's incident was resolved reopens it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from processors.incidents import (
    actions,
    blame,
    cause,
    changes,
    correlate,
    impact,
    opening,
    power,
    reasons,
    slowdown,
    weighing,
)
from processors.incidents.book import AttemptKey, Signal, akey, millis, node_of
from processors.incidents.rules import SignalRule
from processors.incidents.signals import join
from processors.timeline import TimelineRow, event_filesystem, event_node, event_switch
from schemas import incident_events as ev
from schemas.events import Event

if TYPE_CHECKING:
    from processors.incidents.context import Context


def group_key(ctx: Context, event: Event, klass: str) -> str:
    group = ctx.rules.klass(klass).group
    if group == "node":
        return f"node:{event_node(event) or node_of(event.entity or '')}"
    if group == "switch":
        switch, _ = event_switch(event)
        return f"network:{switch or event_node(event) or event.entity}"
    if group == "filesystem":
        fs = event_filesystem(event, ctx.topology())
        return f"storage:{fs or event.entity or event.attributes.get('target', '')}"
    if event.job_id:
        return f"{klass}:{akey(ctx.book.attempt_key(event))}"
    return f"{klass}:{event.entity or event.node}"


def on_signal(ctx: Context, event: Event, rule: SignalRule, rows: Sequence[TimelineRow]) -> None:
    book, rules = ctx.book, ctx.rules
    reached = {(r.project, r.job_id, r.attempt): (r.relation, r.link_path) for r in rows
               if r.relation != "self"}
    if event.job_id:
        reached[ctx.book.attempt_key(event)] = ("self", event.job_id)
    if rule.name == power.RULE:
        power.consequence(ctx, event, rule, Signal(event, rule, "", reached))
        return
    key = group_key(ctx, event, rule.klass)
    signal = Signal(event, rule, key, reached)
    book.signals.append(signal)
    changes.remember(ctx, event, reached)
    window = book.counts.setdefault((rule.name, key), deque())
    horizon = event.time - timedelta(seconds=rule.threshold.window_s)
    window.append(millis(event.time))
    since = millis(horizon, up=True)
    while window and window[0] < since:
        window.popleft()
    open_id = book.open.get(key)
    if open_id is not None:
        inc = book.incidents[open_id]
        if inc.last_signal_at and event.time - inc.last_signal_at > timedelta(
                seconds=rules.group_window_s):
            book.open.pop(key, None)
            open_id = None
    if open_id is None and key in book.resolved:
        old = book.incidents[book.resolved[key]]
        if old.status == "resolved" and old.resolved_at and event.time - old.resolved_at <= \
                timedelta(seconds=rules.group_window_s):
            book.emit(old.id, ev.Reopened(why=f"{rule.klass} signal on {key} again after "
                                          "resolution", event_id=event.id),
                      event.time, rule.name, event.id)
            book.open[key] = old.id
            book.resolved.pop(key, None)
            open_id = old.id
    if open_id is None and blame.recurring(ctx, signal):
        open_id = blame.incident(ctx, signal, event.time)  # the same GPU failing the rerun
    parent = consequence_of(ctx, event, rule, signal) if open_id is None else None
    if parent is not None:
        book.emit(parent, ev.SignalAdded(event_id=event.id, rule=rule.name,
                                         detail=f"consequence: {rule.klass} on "
                                         f"{event.entity or event.node}"),
                  event.time, rule.name, event.id)
        ctx.book.evidence(parent, event, "consequence", f"{rule.why or rule.klass}, on a node the "
                          "incident already holds, after its cause", rule.name)
        actions.for_consequence(ctx, parent, event.time, event, rule.klass, rule.name)
    elif open_id is not None:
        join(ctx, open_id, signal)
        self_impact(ctx, open_id, event, rule)
    elif len(window) >= rule.threshold.count:
        recent = [s for s in book.signals if s.key == key and s.rule.name == rule.name
                  and s.event.time >= horizon]
        first = recent[0].event
        # a job's own signal (a preemption) is about its attempt, not the grouping key
        named = first.entity or (akey(book.attempt_key(first)) if first.job_id else key)
        inc_id = opening.open_incident(ctx, key, rule.klass, event.entity or named, first.id,
                                       first.time, rule.name, event.time, event.observed_at)
        count = (f"{len(recent)} signals within {rule.threshold.window_s:.0f} s"
                 if len(recent) > 1 else "one signal")
        book.emit(inc_id, ev.CauseUpdated(
            klass=rule.klass, entity=named, event_id=first.id, confidence=0.7,
            explanation=f"{named} reported {first.type} "
                        f"({rule.why or rule.klass}{reasons.said(first)}): {count}, rule "
                        f"{rule.name}. "
                        "No job symptom linked yet.", source="signal"),
                  event.time, rule.name, f"cause:{first.id}")

        actions.propose(ctx, inc_id, event.time, first, rule.name)
        for s in recent:
            join(ctx, inc_id, s)
        self_impact(ctx, inc_id, event, rule)

    cause.late(ctx, signal)
    slowdown.localise_late(ctx, signal)
    standing = next((s for s in reversed(book.changes) if s.event.id == event.id), None)
    if standing is not None:
        cause.late(ctx, standing)


def consequence_of(ctx: Context, event: Event, rule: SignalRule, signal: Signal) -> str | None:
    """The active incident a node signal follows from, if any: a drain, a not-ready or an
    Xid on a node whose attempts an incident already holds (every attempt the signal
    reached is in it, or it reached none and the node ran one of the incident's attempts),
    within `group_window_s` after the incident's first signal. One story, one incident. A
    job's own incident whose first symptom is at the signal's very instant is not followed
    from: the signal is that symptom's candidate cause (`cause.late` moves it), whatever
    order the two same-instant events were taken in."""
    if ctx.rules.klass(rule.klass).group != "node" or event.job_id:
        return None
    node = event_node(event) or node_of(event.entity or "")
    if not node:
        return None
    window = timedelta(seconds=ctx.rules.group_window_s)
    reached = set(signal.reached)
    best: tuple[datetime, str] | None = None
    for inc_id in set(ctx.book.open.values()):
        inc = ctx.book.incidents[inc_id]
        first = inc.first_signal_at
        if not inc.active or first is None or not (first <= event.time <= first + window):
            continue
        if first == event.time and inc.cause_source == "job" and inc.job_scoped:
            continue  # a job's own failure at the signal's instant: a cause (`cause.late`)
        held = {(j.project, j.job_id, j.attempt) for j in inc.jobs.values()
                if j.role in ("failed", "degraded")}
        if inc.cause_source == "job" and inc.job_scoped and any(
                (p := ctx.book.progress.get(k)) is not None and p.uncertain is not None
                and p.uncertain[0] <= first <= event.time <= p.uncertain[1] for k in held):
            continue  # inside the interval of a symptom with no time of its own: a cause
        if not held:
            continue
        if reached:
            follows = reached <= held
        else:
            follows = any(node in (a.nodes if (a := ctx.book.attempt(k)) else ()) for k in held)
        if follows and (best is None or (first, inc_id) < best):
            best = (first, inc_id)
    return best[1] if best else None


def self_impact(ctx: Context, inc_id: str, event: Event, rule: SignalRule) -> None:
    """A job-scoped signal (a preemption) impacts its own attempt."""
    if event.job_id:
        key = ctx.book.attempt_key(event)
        ctx.book.evidence(inc_id, event, "cause", rule.why, rule.name, key)
        if not _takes_over(ctx, inc_id, event, key):
            impact.impacted(ctx, inc_id, key, event.time, rule.name, role="failed")


def _takes_over(ctx: Context, inc_id: str, event: Event, key: AttemptKey) -> bool:
    """A job-scoped signal that arrives after its attempt's failure was decided from the
    job's own evidence alone (the training log imported before the scheduler's: a hang
    inferred where the scheduler had preempted it) moves the attempt out of that job-own
    incident into its own, as if it had come first. True when it did."""
    book = ctx.book
    held = book.by_attempt.get(key)
    if held is None or held == inc_id:
        return False
    was = book.incidents[held]
    job = was.jobs.get(akey(key))
    if not was.active or not was.job_scoped or was.cause_source != "job" or job is None \
            or job.role != "failed" or was.first_signal_at is None \
            or was.first_signal_at < event.time:
        return False
    ranked = weighing.candidates(ctx, key, was.first_signal_at)
    if not ranked or ranked[0].signal.event.id != event.id:
        return False
    correlate.move(ctx, key, held, inc_id, event.time, ranked)
    return True



def reach(ctx: Context, rows: Sequence[TimelineRow]) -> None:
    """Late attribution (an attempt that started after the signal arrived) widens the
    fault domains the remembered signals reached."""
    if not any(row.relation != "self" for row in rows):
        return
    by_id: dict[str, list[Signal]] = {}
    for s in (*ctx.book.signals, *ctx.book.changes):
        by_id.setdefault(s.event.id, []).append(s)
    for row in rows:
        if row.relation == "self":
            continue
        for signal in by_id.get(row.event.id, ()):
            signal.reach((row.project, row.job_id, row.attempt), (row.relation, row.link_path))


def forget(ctx: Context) -> None:
    """Signals older than twice the longest window cannot be a cause any more."""
    assert ctx.book.watermark is not None
    horizon = ctx.book.watermark - timedelta(seconds=max(ctx.rules.cause_window_s,
                                                         ctx.rules.group_window_s) * 2)
    signals = ctx.book.signals
    while signals and signals[0].event.time < horizon:
        signals.popleft()
