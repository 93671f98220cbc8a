"""Symptom versus cause.

A job symptom looks back `cause_window_s` for the signals that reached its attempt's fault
domain and takes the strongest (`weighing`: specificity, agreement with the job's own
message, how many failing attempts it explains; then the earliest). Found, the symptom
joins (or opens) that entity's incident and the cause is explained, with the candidates
that lost; not found (or only weak candidates against an unmistakable message of the
job's own), the attempt gets an incident of its own classified from its own evidence, the
highest-ranked symptom naming the class, citing a change the attempt started with. A
signal that arrives after the symptoms it explains updates their job-own incident.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from processors.attempts import Attempt
from processors.incidents import (
    actions,
    blame,
    changes,
    correlate,
    impact,
    opening,
    reasons,
    routing,
    severity,
    weighing,
)
from processors.incidents.book import AttemptKey, Progress, Signal, akey
from processors.incidents.rules import SymptomRule
from processors.incidents.signals import join
from schemas import incident_events as ev
from schemas.events import Event, parse_time

if TYPE_CHECKING:
    from processors.incidents.context import Context

CONFIDENCE = weighing.CONFIDENCE
_RELATION_PHRASE = {"node": "is that node", "gpu": "holds that GPU",
                    "nic": "is cabled to it", "switch": "sits under that switch",
                    "target": "mounts the filesystem it serves", "filesystem": "mounts it",
                    "rank": "runs that rank", "change": "is under that change",
                    "client": "is the storage client that reported it"}


def find(ctx: Context, key: AttemptKey, time: datetime, since: datetime | None = None,
         node: str = "", rule: SymptomRule | None = None) -> tuple[Signal, str, str] | None:
    """The strongest signal that reached the attempt in the window (`weighing`; only
    `node`'s own, when given: a straggler's cause is on the straggler)."""
    ranked = weighing.candidates(ctx, key, time, since, node, rule)
    return (ranked[0].signal, ranked[0].relation, ranked[0].path) if ranked else None


def _holder(ctx: Context, key: AttemptKey) -> str | None:
    """The active incident in memory that holds `key` as failed, for an attempt whose job the
    detector has forgotten (a symptom a day late, from a file imported after the others):
    its index went with the job, the incident did not."""
    if (key[0], key[1]) in ctx.book.jobs:
        return None
    held = akey(key)
    return next((inc.id for inc in dict.values(ctx.book.incidents) if inc.active
                 and (job := inc.jobs.get(held)) is not None and job.role == "failed"), None)


def on_symptom(ctx: Context, event: Event | None, rule: SymptomRule, key: AttemptKey,
               time: datetime, discriminator: str, since: datetime | None = None,
               node: str = "") -> str | None:
    """Returns the incident the symptom went to."""
    book, rules = ctx.book, ctx.rules
    if event is not None and (bounds := interval(event)) is not None \
            and book.by_attempt.get(key) is None:
        book.progress.setdefault(key, Progress()).uncertain = bounds
    klass = rules.klass(rule.klass)
    current = book.by_attempt.get(key) or _holder(ctx, key)
    if current is not None and not klass.separate and book.incidents[current].active:
        if event is not None and book.room(key, event.type, rules.max_symptom_evidence):
            ctx.book.evidence(current, event, "symptom", rule.why, rule.name, key)
        reclassify(ctx, current, rule, time, key)
        return current
    began = hang_began(event)
    if began is not None and since is None:
        since = began - timedelta(seconds=rules.cause_window_s)
    ranked = weighing.candidates(ctx, key, time, since, node, rule,
                                 on=event.node or "" if event is not None else "")
    if began is not None:  # a counter tick or a blip after the collective hung: not its
        # cause (a hard fault is kept: the watchdog's timer is its own rank's, and a peer
        # may have entered the collective later)
        ranked = [c for c in ranked if c.score > 1 or c.signal.event.time
                  <= began + timedelta(seconds=rules.cause_slack_s)]
    chosen = ranked[0] if ranked and not weighing.own_wins(
        ranked[0], rule, rules.change_explains) else None
    if chosen is not None:
        signal, relation, path = chosen.signal, chosen.relation, chosen.path
        inc_id = book.open.get(signal.key)
        if inc_id is None and signal.rule.name == blame.RULE:
            inc_id = blame.incident(ctx, signal, time)
        if inc_id is None:
            inc_id = opening.open_incident(ctx, signal.key, signal.rule.klass,
                                           entity_of(signal), signal.event.id,
                                           signal.event.time, signal.rule.name, time,
                                           event.observed_at if event else None)
            for s in book.signals:
                if s.key == signal.key and signal.event.time <= s.event.time <= time:
                    join(ctx, inc_id, s)
        ctx.book.evidence(inc_id, signal.event, "cause", signal.rule.why, signal.rule.name)
        what = f"first {event.type}" if event else rule.why
        if book.incidents[inc_id].cause_source in ("", "signal"):
            explain(ctx, inc_id, signal, key, time, what, relation, path, symptom=event,
                    lost=weighing.losers(ranked, chosen))
        elif signal.rule.klass == changes.KLASS:
            _also(ctx, inc_id, signal, key, time, what)
        if signal.rule.name == blame.RULE:
            _blamed_again(ctx, inc_id, signal, key, time, what, event)
    elif (prior := regressed(ctx, key, rule)) is not None:
        inc_id = prior
        again(ctx, inc_id, rule, key, time)
    else:
        inc_id = opening.open_incident(ctx, f"job:{akey(key)}", rule.klass, akey(key),
                                       discriminator, time, rule.name, time,
                                       event.observed_at if event else None)
        own(ctx, inc_id, rule, key, time, event, lost=weighing.losers(ranked, None))
    if event is not None and book.room(key, event.type, rules.max_symptom_evidence):
        ctx.book.evidence(inc_id, event, "symptom", rule.why, rule.name, key)
    if klass.separate:
        progress = book.progress.setdefault(key, Progress())
        progress.failed_ckpt = (time, inc_id)

    impact.impacted(ctx, inc_id, key, time, rule.name, role=klass.impact, event=event)
    if chosen is not None and klass.impact == "failed":
        blame.record(ctx, chosen.signal, inc_id, key, time)
        correlate.regroup(ctx, inc_id, time)
    if klass.impact == "failed":
        correlate.shared_nodes(ctx, inc_id, key, time)
    return inc_id


def own(ctx: Context, inc_id: str, rule: SymptomRule, key: AttemptKey, time: datetime,
        symptom: Event | None = None, lost: str = "") -> None:
    window = int(ctx.rules.cause_window_s // 60)
    lead = (f"The job's own message outweighs every signal that reached {akey(key)} in the "
            f"{window} min before its first failure at {time.isoformat()}" if lost else
            f"No hardware, network, storage or scheduler signal reached {akey(key)} "
            f"in the {window} min before its first failure at {time.isoformat()}")
    explanation = (f"{lead}; classified from the job's own evidence: {rule.why or rule.klass} "
                   f"(rule {rule.name}).{changed(ctx, key, time)}{lost}")
    ctx.book.emit(inc_id, ev.CauseUpdated(
        klass=rule.klass, entity=akey(key), confidence=ctx.rules.klass(rule.klass).own_confidence,
        explanation=explanation, rank=rule.rank, source="job"), time, rule.name,
                  f"own:{rule.name}")

    routing.route(ctx, inc_id, time, rule.name, project=key[0])
    actions.propose(ctx, inc_id, time, symptom, rule.name)


def reclassify(ctx: Context, inc_id: str, rule: SymptomRule, time: datetime,
               key: AttemptKey) -> None:
    """A job-own incident takes the class of its highest-ranked symptom."""
    inc = ctx.book.incidents[inc_id]
    if inc.cause_source != "job" or not inc.job_scoped:
        return
    current = next((r for r in ctx.rules.symptoms if r.klass == inc.cause_class), None)
    if current is not None and rule.rank <= current.rank:
        return
    own(ctx, inc_id, rule, key, time)


def _blamed_again(ctx: Context, inc_id: str, signal: Signal, key: AttemptKey,
                  time: datetime, what: str, symptom: Event | None) -> None:
    """The node this incident blamed failed another attempt, with another symptom: cited."""
    inc = ctx.book.incidents[inc_id]
    node = signal.key[len("node:"):]
    seen = f" ({symptom.type})" if symptom is not None else ""
    ctx.book.emit(inc_id, ev.CauseUpdated(
        klass=inc.cause_class or inc.klass, entity=inc.cause_entity or inc.entity,
        event_id=inc.cause_event, confidence=inc.confidence, source=inc.cause_source,
        relation="node", explanation=f"{inc.explanation} It also explains the {what}{seen} of "
        f"{akey(key)} at {time.isoformat()}, seen on {node} again: {signal.rule.why}, and no "
        "new signal outweighs it."), time, signal.rule.name, f"blamed:{akey(key)}")
    severity.flag(ctx, inc_id, "repeat", time, signal.rule.name,
                  f"{node} failed {akey(key)} too")


def interval(event: Event) -> tuple[datetime, datetime] | None:
    """The interval a symptom printed without a time of its own lies in (its reader's
    `time_lower`, `time_upper`), or None."""
    lower, upper = event.attributes.get("time_lower"), event.attributes.get("time_upper")
    if not isinstance(lower, str) or not isinstance(upper, str):
        return None
    try:
        low, high = parse_time(lower), parse_time(upper)
    except ValueError:
        return None
    return (low, high) if low <= event.time <= high and low < high else None


def hang_began(event: Event | None) -> datetime | None:
    """When the collective an NCCL watchdog timed out began: the report less how long the
    operation ran (`ran_ms`, else the watchdog's `timeout_ms`; a second at least, or None).
    A weak signal after that instant did not hang it (a link's symbol errors ticking seven
    minutes into a ten-minute hang are not its cause)."""
    if event is None or event.type != "comm.nccl_timeout":
        return None
    for name in ("ran_ms", "timeout_ms"):
        value = event.attributes.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool) and value >= 1000:
            return event.time - timedelta(milliseconds=float(value))
    return None


def entity_of(signal: Signal) -> str:
    """What an incident opened on `signal` is about: a change's name, else the entity."""
    return changes.name(signal) or signal.event.entity or signal.key


def _also(ctx: Context, inc_id: str, signal: Signal, key: AttemptKey, time: datetime,
          what: str) -> None:
    """Another attempt that started under the change failed: the change is cited for it."""
    inc = ctx.book.incidents[inc_id]
    attempt = ctx.book.attempt(key)
    started = attempt.started_at if attempt is not None else None
    after = f" {(started - signal.event.time).total_seconds() / 60:.0f} min after the " \
            "change" if started is not None else " after the change"
    ctx.book.emit(inc_id, ev.CauseUpdated(
        klass=inc.cause_class or inc.klass, entity=inc.cause_entity or inc.entity,
        event_id=inc.cause_event, confidence=inc.confidence, source=inc.cause_source,
        relation="change", explanation=f"{inc.explanation} It also explains the {what} of "
        f"{akey(key)} at {time.isoformat()} (it started{after}, under {changes.name(signal)})."),
        time, signal.rule.name, f"explains:{akey(key)}")


_VERSIONS = (("image", "image"), ("code_version", "code version"), ("config_hash", "config"))


def _versions(attempt: Attempt) -> tuple[str, ...]:
    return tuple(getattr(attempt, name) or "" for name, _ in _VERSIONS)


def regressed(ctx: Context, key: AttemptKey, rule: SymptomRule) -> str | None:
    """The job's own incident of an earlier attempt that ran what this attempt runs, the
    first with a change (an image, code or config other than the attempt before it's), and
    failed the same way (the class of `rule`): a regression that fails attempt after
    attempt is one incident."""
    book = ctx.book
    job = book.jobs.get((key[0], key[1]))
    attempt = job.attempts.get(key[2]) if job is not None else None
    if job is None or attempt is None or not any(mine := _versions(attempt)):
        return None
    same = []
    n = key[2] - 1
    while n >= 1 and (other := job.attempts.get(n)) is not None and _versions(other) == mine:
        same.append(n)
        n -= 1
    if not same or n < 1 or job.attempts.get(n) is None:
        return None  # no earlier attempt with these versions, or no change before them
    for number in sorted(same):
        inc_id = book.by_attempt.get((key[0], key[1], number))
        inc = book.incidents[inc_id] if inc_id is not None else None
        if inc is not None and inc.active and inc.job_scoped and inc.cause_source == "job" \
                and inc.cause_class == rule.klass:
            return inc.id
    return None


def again(ctx: Context, inc_id: str, rule: SymptomRule, key: AttemptKey,
          time: datetime) -> None:
    """The regression failed another attempt the same way: cited on that attempt too."""
    inc = ctx.book.incidents[inc_id]
    attempt = ctx.book.attempt(key)
    runs = "; ".join(f"{label} {value}" for (_, label), value in zip(
        _VERSIONS, _versions(attempt), strict=True) if value) if attempt else ""
    since = attempt.started_at if attempt is not None and attempt.started_at else time
    minutes = max(0.0, (time - since).total_seconds() / 60)
    ctx.book.emit(inc_id, ev.CauseUpdated(
        klass=inc.cause_class or inc.klass, entity=inc.cause_entity or inc.entity,
        confidence=inc.confidence, rank=inc.cause_rank, source="job",
        explanation=f"{inc.explanation} It failed again {minutes:.0f} min into attempt "
        f"{key[2]}, which runs the same {runs} ({rule.why or rule.klass}, rule {rule.name})."),
        time, rule.name, f"again:{akey(key)}")
    severity.flag(ctx, inc_id, "repeat", time, rule.name,
                  f"{akey(key)} failed the same way after the same change")


def changed(ctx: Context, key: AttemptKey, time: datetime) -> str:
    """' It started N min after a change: ...' when the attempt runs another image, code or
    config than the attempt before it (an ImportError right after an image change)."""
    attempt = ctx.book.attempt(key)
    before = ctx.book.attempt((key[0], key[1], key[2] - 1)) if key[2] > 1 else None
    if attempt is None or before is None:
        return ""
    moved = [f"{name.replace('_', ' ')} {old or '(none)'} -> {new}"
             for name, old, new in (("image", before.image, attempt.image),
                                    ("code_version", before.code_version, attempt.code_version),
                                    ("config_hash", before.config_hash, attempt.config_hash))
             if new and new != old]
    if not moved:
        return ""
    since = attempt.started_at or time
    minutes = max(0.0, (time - since).total_seconds() / 60)
    return (f" It failed {minutes:.0f} min into attempt {key[2]}, the first with a change: "
            f"{'; '.join(moved)}.")


def explain(ctx: Context, inc_id: str, signal: Signal, key: AttemptKey, time: datetime,
            what: str, relation: str, path: str, symptom: Event | None = None,
            lost: str = "") -> None:
    cause = signal.event
    gap = (time - cause.time).total_seconds()
    when = f"{abs(gap):.0f} s {'before' if gap >= 0 else 'after'}"
    progress = ctx.book.progress.get(key)
    bounds = progress.uncertain if progress is not None else None
    if gap < 0 and bounds is not None and bounds[0] <= time <= bounds[1] \
            and cause.time <= bounds[1]:
        when = f"at {cause.time.isoformat()}, inside the interval of"
        seen_untimed = (f" (its line has no time of its own: printed between "
                        f"{bounds[0].isoformat()} and {bounds[1].isoformat()}, so the order is "
                        "uncertain and the fault may well have come first)")
        gap = 0.0
    else:
        seen_untimed = ""
    linked = path.split(" → ")[-1] if path else ""
    seen_on = (f" (seen on {symptom.node})" if symptom and symptom.node else "") + seen_untimed
    link = _RELATION_PHRASE.get(relation, f"is linked to it ({relation})")
    entity = changes.name(signal) or cause.entity or cause.node or signal.key
    if signal.rule.klass == changes.KLASS:
        attempt = ctx.book.attempt(key)
        text = changes.explanation(signal, akey(key), attempt.started_at if attempt else None,
                                   time, what, path) + lost
        ctx.book.emit(inc_id, ev.CauseUpdated(
            klass=signal.rule.klass, entity=entity, event_id=cause.id,
            confidence=round(CONFIDENCE["change"], 2), explanation=text, relation=relation,
            source="infrastructure"), time, signal.rule.name, f"cause:{cause.id}:{akey(key)}")
        routing.route(ctx, inc_id, time, signal.rule.name, team=changes.owner(cause))
        actions.propose(ctx, inc_id, time, cause, signal.rule.name)
        return
    explanation = (f"{entity} reported {cause.type} ({signal.rule.why or signal.rule.klass}"
                   f"{reasons.said(cause)})"
                   f" {when} the {what} of {akey(key)}{seen_on}; "
                   + (f"{linked}, one of the attempt's own, {link}" if linked and
                      relation != "self" else "it is the attempt's own signal")
                   + (f" (path {path})." if path and relation != "self" else ".") + lost)
    confidence = CONFIDENCE.get(relation, 0.5) - (0.1 if gap > 300 else 0.0)
    ctx.book.emit(inc_id, ev.CauseUpdated(
        klass=signal.rule.klass, entity=entity, event_id=cause.id,
        confidence=round(confidence, 2), explanation=explanation, relation=relation,
        source="infrastructure"), time, signal.rule.name, f"cause:{cause.id}:{akey(key)}")

    routing.route(ctx, inc_id, time, signal.rule.name)
    actions.propose(ctx, inc_id, time, cause, signal.rule.name)


def late(ctx: Context, signal: Signal) -> None:
    """A signal that arrives after the symptoms it explains moves their attempt out of its
    job-own incident into the signal's (opened if need be), as if it had come first: a
    not-ready and the requeue it caused, stamped in the same second and taken requeue first,
    are one node incident, not a node incident and a job's one reclassified beside it. The
    job-own incident is withdrawn into it when it held nothing else. When the signal is not
    the attempt's strongest candidate, or the job's own message outweighs it, the job-own
    incident is explained in place."""
    book, limit = ctx.book, timedelta(seconds=ctx.rules.cause_window_s)
    for key, (relation, path) in signal.reached.items():
        inc_id = book.by_attempt.get(key)
        if inc_id is None:
            continue
        inc = book.incidents[inc_id]
        if not inc.active or inc.cause_source != "job" or not inc.job_scoped:
            continue
        first = inc.first_signal_at
        progress = book.progress.get(key)
        bounds = progress.uncertain if progress is not None else None
        uncertain = bounds is not None and first is not None \
            and bounds[0] <= first <= signal.event.time <= bounds[1]
        if first is None or not (uncertain or signal.event.time <= first
                                 <= signal.event.time + limit):
            continue
        job = inc.jobs.get(akey(key))
        ranked = weighing.candidates(ctx, key, first) if job is not None \
            and job.role == "failed" else []
        best = ranked[0] if ranked else None
        if best is None or best.signal.key != signal.key or book.open.get(signal.key) == inc_id \
                or ((inc.cause_rank or 0) >= weighing.OWN_RANK and best.score <= 1
                    and inc.cause_class != signal.rule.klass):
            explain(ctx, inc_id, signal, key, first, "first symptom", relation, path)
            continue
        to_id = book.open.get(signal.key)
        if to_id is None:
            to_id = opening.open_incident(ctx, signal.key, signal.rule.klass,
                                          entity_of(signal), signal.event.id,
                                          signal.event.time, signal.rule.name, first)
            for s in book.signals:
                if s.key == signal.key and signal.event.time <= s.event.time <= first:
                    join(ctx, to_id, s)
        if book.incidents[to_id].cause_source in ("", "signal"):
            explain(ctx, to_id, signal, key, first, "first symptom", relation, path)
        correlate.move(ctx, key, inc_id, to_id, first, ranked)
