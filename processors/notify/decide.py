"""Which notifications to send: a pure function of the subscriptions, the silences, the
incident logs and `now` (which only bounds how far repeats are scheduled ahead).

Per subscription and incident, the log is folded event by event and each change a person
would want to hear about becomes a transition (opened, cause changed, severity raised, owner
changed, mitigated, recovery verified or failed, resolved, reopened, postmortem published:
`processors/notify/changes.py`).
Then, in this order:

1. only transitions the subscription asked for, on incidents its matchers and projects
   select (before or after the change: a subscriber hears that an incident left it);
2. the first message waits `wait_s` (30 s) and folds the cause, owner and severity changes
   of that window into itself, so opened + cause + owner is one message;
3. a reopen within `flap_hold_s` of its resolve is held that long and dropped, with the
   resolve that ends it, if the incident is resolved again meanwhile (flap damping);
4. the first message of an unacknowledged sev1 repeats every `repeat_s` until it is
   acknowledged, mitigated or resolved (at most `max_repeats`; only the reminder due now
   is sent, earlier unsent ones are superseded by it);
   a transition more than `max_age_s` older than the newest incident event is stale
   (a backfill of old history does not page anyone); and an incident that was over (resolved,
   mitigated, or every failed job recovered) before jobtrail first saw it (`seen`: its log's
   first record, wall clock) is history, not paged unless the subscription asks (`history`);
5. across incidents: silences, then a job-symptom incident whose cause is an entity another
   incident already notified this subscriber about is muted, then the rate limit;
6. quiet hours move what may wait to their end; digests to the next cron tick.

Every suppression is a decision too (status `suppressed`, with its reason), so the outbox
logs why nothing was sent. Ids hash (subscription, incident, key): a replay decides the same.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from processors.incidents.model import Incident, IncidentEvent, fold
from processors.notify.changes import FOLDABLE, Change, Snapshot, changes, labels
from processors.notify.model import Decision, Silence, Subscription, decision_id


def _selected(sub: Subscription, lab: Mapping[str, tuple[str, ...]]) -> bool:
    if not lab:
        return False
    if sub.projects and not set(lab.get("project") or ()) & set(sub.projects):
        return False
    return all(m.matches(lab) for m in sub.matchers)


def _decision(sub: Subscription, incident: str, change: Change, *, key: str = "",
              not_before: datetime | None = None, status: str = "pending", reason: str = "",
              transition: str = "") -> Decision:
    k = key or change.key
    return Decision(decision_id(sub.id, incident, k), sub.id, incident,
                    transition or change.transition, k, change.seq, change.time,
                    not_before or change.time, status, reason, severity=change.severity,
                    labels=change.after)


@dataclass(frozen=True)
class History:
    """One incident's transitions and label snapshots as a set of projects sees them, and
    its final state: computed once per incident and binding, shared by subscriptions."""

    changes: list[Change]
    snapshots: list[Snapshot]
    final: Incident


def history(log: Sequence[IncidentEvent], projects: Sequence[str] = ()) -> History:
    snapshots: list[Snapshot] = []
    found = changes(log, projects, snapshots)
    return History(found, snapshots, next(iter(fold(list(log)).values())))


def for_incident(sub: Subscription, incident: str, log: Sequence[IncidentEvent],
                 now: datetime, seen: History | None = None) -> list[Decision]:
    """Steps 1-4 for one incident."""
    out: list[Decision] = []
    first: Decision | None = None
    last_resolved: datetime | None = None
    damped_until: datetime | None = None
    seen = seen or history(log, sub.projects)
    snapshots = seen.snapshots
    all_changes = seen.changes
    resolves = [c.time for c in all_changes if c.transition == "resolved"]
    for change in all_changes:
        wanted = change.transition in sub.on or (first is None and change.transition
                                                 in FOLDABLE and "opened" in sub.on)
        settled = change.after
        if first is None:  # selected by what the incident is once the wait is over
            until = change.time + timedelta(seconds=sub.wait_s)
            settled = next((s.labels for s in reversed(snapshots) if s.time <= until),
                           change.after)
        chosen = _selected(sub, settled) if first is None else (
            _selected(sub, change.after) or _selected(sub, change.before))
        if not wanted or not chosen:
            if change.transition == "resolved":
                last_resolved = change.time
            continue
        if first is None:
            # the first message this subscriber gets about the incident, after the wait
            first = replace(_decision(sub, incident, change, key="first",
                                      not_before=change.time + timedelta(seconds=sub.wait_s)),
                            labels=settled, severity=(settled.get("severity") or ("",))[0])
            out.append(first)
            continue
        if change.transition in FOLDABLE and change.time < first.not_before:
            out.append(_decision(sub, incident, change, status="suppressed",
                                 reason=f"folded into the first message ({first.id})"))
            first = replace(first, folded=(*first.folded, change.transition),
                            severity=change.severity, labels=change.after)
            out[next(i for i, d in enumerate(out) if d.id == first.id)] = first
            continue
        if change.transition == "reopened" and last_resolved is not None and \
                change.time - last_resolved < timedelta(seconds=sub.flap_hold_s):
            hold = change.time + timedelta(seconds=sub.flap_hold_s)
            again = [t for t in resolves if change.time < t <= hold]
            if again:
                out.append(_decision(sub, incident, change, status="suppressed",
                                     reason="flap damped: resolved again within "
                                            f"{sub.flap_hold_s} s of reopening"))
                damped_until = again[0]
            else:
                out.append(_decision(sub, incident, change, not_before=hold,
                                     reason=f"flap damping: held {sub.flap_hold_s} s"))
            continue
        if change.transition == "resolved":
            last_resolved = change.time
            if damped_until is not None and change.time == damped_until:
                out.append(_decision(sub, incident, change, status="suppressed",
                                     reason="flap damped: the reopen it ends was not sent"))
                damped_until = None
                continue
        out.append(_decision(sub, incident, change))
    if first is not None:
        out += _repeats(sub, incident, first, seen.final, now)
    return out + _deadlines(sub, incident, seen, now)


def _deadlines(sub: Subscription, incident: str, seen: History,
               now: datetime) -> list[Decision]:
    """Clock-driven transitions, due once their date has passed (as of `now`): the
    postmortem is due and not published, a follow-up is overdue and still open."""
    from processors.postmortem.checklist import CLOSED_ACTIONS, postmortem_due

    final = seen.final
    lab = labels(final, sub.projects)
    if not _selected(sub, lab) or final.opened_at is None:
        return []
    found: list[tuple[str, str, str]] = []  # transition, key, due date
    if "postmortem_due" in sub.on:
        due = postmortem_due(final) or final.pm.due
        if due and final.pm.status not in ("published", "waived"):
            found.append(("postmortem_due", f"postmortem-due-{due}", due))
    if "followup_overdue" in sub.on:
        mine = set(sub.projects)
        for action in sorted(final.actions.values(), key=lambda a: a.action_id):
            if action.status in CLOSED_ACTIONS or action.status == "done" or not action.due:
                continue
            if mine and action.projects and not set(action.projects) & mine:
                continue
            found.append(("followup_overdue", f"overdue-{action.action_id}-{action.due}",
                          action.due))
    out = []
    for transition, key, due in found:
        try:
            at = datetime.fromisoformat(due).replace(tzinfo=UTC) + timedelta(days=1)
        except ValueError:
            continue
        if at > now:
            continue  # not due yet: decided on the pass after it is
        out.append(Decision(decision_id(sub.id, incident, key), sub.id, incident, transition,
                            key, final.seq, at, at, "pending", f"due {due}",
                            severity=final.severity, labels=lab))
    return out


def _repeats(sub: Subscription, incident: str, first: Decision, final: Incident,
             now: datetime) -> list[Decision]:
    """The reminder due now for an unacknowledged sev1 (earlier ones superseded by it), to
    the owning team's subscriptions only; none once it was acknowledged, mitigated or
    resolved, its jobs recovered, or after the repeat window."""
    if sub.repeat_s <= 0 or first.severity != "sev1" or now < first.not_before:
        return []
    if final.owner and sub.owner.removeprefix("team:") != final.owner:
        return []
    every = timedelta(seconds=sub.repeat_s)
    due = min(int((now - first.not_before) / every), sub.max_repeats)
    if now - first.not_before > every * (sub.max_repeats + 1) or due < 1:
        return []
    failed = [j for j in final.jobs.values() if j.role == "failed"]
    recovered = max((j.verified_at for j in failed if j.verified_at), default=None) \
        if failed and all(j.verified_at for j in failed) else None
    handled = [t for t in (final.acknowledged_at, final.mitigated_at, final.resolved_at,
                           recovered) if t is not None]
    times = [first.not_before + every * k for k in range(1, due + 1)]
    live = [at for at in times if not any(t <= at for t in handled)]
    out = []
    for k, at in enumerate(live, start=1):
        latest = k == len(live)
        out.append(Decision(decision_id(sub.id, incident, f"repeat-{k}"), sub.id, incident,
                            "repeat", f"repeat-{k}", first.seq, first.time, at,
                            "pending" if latest else "suppressed",
                            f"unacknowledged sev1: reminder {k} of at most {sub.max_repeats}"
                            if latest else f"superseded by reminder {len(live)}",
                            severity=first.severity, labels=first.labels))
    return out


HISTORY_SLACK = timedelta(minutes=5)
"""How long before jobtrail saw an incident it may have been over and still be live (clock
skew between a source and this host, a batch in flight)."""


def over_at(inc: Incident) -> datetime | None:
    """When the incident was over, in event time: resolved, mitigated, or every failed job
    recovered (None while it is not)."""
    failed = [j for j in inc.jobs.values() if j.role == "failed"]
    recovered = max(j.verified_at for j in failed if j.verified_at) \
        if failed and all(j.verified_at for j in failed) else None
    ends = [t for t in (inc.resolved_at, inc.mitigated_at, recovered) if t is not None]
    return min(ends) if ends else None


def _history(sub: Subscription, decisions: list[Decision], final: Incident,
             seen: datetime | None) -> list[Decision]:
    """An incident over before it was seen (a backfill, a late import) pages nobody unless
    the subscription asks: its decisions are logged as suppressed, saying so."""
    if sub.history or seen is None:
        return decisions
    ended = over_at(final)
    if ended is None or ended >= seen - HISTORY_SLACK:
        return decisions
    why = (f"history: over at {ended:%Y-%m-%d %H:%M} UTC, before jobtrail saw it at "
           f"{seen:%Y-%m-%d %H:%M} UTC (a backfill); a subscription with history pages it")
    return [replace(d, status="suppressed", reason=why) if d.status == "pending" else d
            for d in decisions]


def decide(subscriptions: Iterable[Subscription], silences: Sequence[Silence],
           logs: Mapping[str, Sequence[IncidentEvent]], now: datetime,
           watermark: datetime | None = None,
           seen: Mapping[str, datetime] | None = None) -> list[Decision]:
    """Every decision for every enabled subscription, ordered by subscription and time.
    `watermark` is the newest incident event time (default: the newest in `logs`; pass it
    when `logs` holds only the incidents that changed); `seen` when each incident was first
    recorded (wall clock; an incident not in it is taken as live)."""
    from processors.notify.schedule import deliver_at

    out: list[Decision] = []
    if watermark is None:
        watermark = max((e.time for log in logs.values() for e in log), default=now)
    known: dict[tuple[str, tuple[str, ...]], History] = {}
    for sub in sorted(subscriptions, key=lambda s: s.id):
        if not sub.enabled:
            continue
        mine: list[Decision] = []
        for incident, log in logs.items():
            key = (incident, tuple(sorted(sub.projects)))
            if key not in known:
                known[key] = history(log, sub.projects)
            mine += _history(sub, for_incident(sub, incident, log, now, known[key]),
                             known[key].final, (seen or {}).get(incident))
        mine.sort(key=lambda d: (d.not_before, d.time, d.incident_id, d.key))
        if sub.max_age_s:
            oldest = watermark - timedelta(seconds=sub.max_age_s)
            mine = [replace(d, status="suppressed", reason=f"stale: {d.time.isoformat()} is "
                            f"more than {sub.max_age_s} s before the newest incident event")
                    if d.status == "pending" and d.time < oldest else d for d in mine]
        mine = _across(sub, silences, mine, logs)
        out += [deliver_at(sub, d) for d in mine]
    return out


def _across(sub: Subscription, silences: Sequence[Silence], decisions: list[Decision],
            logs: Mapping[str, Sequence[IncidentEvent]]) -> list[Decision]:
    """Step 5: silences, joined symptoms, the rate limit (in send order)."""
    out: list[Decision] = []
    notified: dict[str, tuple[str, datetime]] = {}  # entity -> (incident, first send)
    sent: list[datetime] = []
    window = timedelta(seconds=sub.rate_limit.per_s)
    for d in decisions:
        if d.status != "pending":
            out.append(d)
            continue
        silence = next((s for s in silences if s.covers(d.labels, d.not_before)), None)
        if silence is not None:
            out.append(replace(d, status="suppressed",
                               reason=f"silenced by {silence.id}: {silence.reason}"))
            continue
        entity = (d.labels.get("entity") or ("",))[0]
        if d.key == "first":
            if (d.labels.get("scope") or ("",))[0] == "job":
                # a job's own incident whose cause is an entity another incident told this
                # subscriber about: that message already covers it
                joined = notified.get(entity)
                if joined is not None and joined[1] <= d.not_before:
                    out.append(replace(d, status="suppressed",
                                       reason=f"joined {joined[0]}, already notified"))
                    continue
            else:
                notified.setdefault(entity, (d.incident_id, d.not_before))
        sent = [t for t in sent if d.not_before - t < window]
        if sub.mode == "immediate" and len(sent) >= sub.rate_limit.count:
            out.append(replace(d, status="suppressed",
                               reason=f"rate limit: {sub.rate_limit.count} per "
                                      f"{sub.rate_limit.per_s} s"))
            continue
        sent.append(d.not_before)
        out.append(d)
    return out
