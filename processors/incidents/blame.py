"""The same node blamed across attempts, whatever its symptom: a node whose fault (an Xid, an
ECC error, a power loss) failed an attempt, and that comes back into the job's next attempt
(returned to service, or never drained: "more often than not we would end up getting the
same bad machine again", the OPT-175B logbook), is a candidate cause of that attempt's
failure when the failure is seen on it again, with another symptom and no new signal (an
NCCL error on its ranks, an illegal memory access).

A node-grouped incident whose cause names the fault (specificity 3: not a not-responding
blip or a drain, which a node back in service is over with) and explains a failed attempt
marks its node blamed for
`blame_window_s` (24 h). A later symptom on that node, of an attempt that runs on it, weighs
the blame as a candidate of specificity `WEIGHT` (below a fresh signal naming a fault, above
a counter tick; one candidate with the node's other signals, which win when present); chosen,
the attempt joins the node's incident (reopened if it was resolved), cited there, flagged
`repeat` (its severity rises).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from processors.incidents.book import AttemptKey, Signal, akey
from processors.incidents.rules import SignalRule
from schemas import incident_events as ev

if TYPE_CHECKING:
    from processors.incidents.context import Context

RULE = "blamed-before"
WEIGHT = 2


def record(ctx: Context, signal: Signal, inc_id: str, key: AttemptKey,
           time: datetime) -> None:
    """A node-grouped cause explained `key`'s failure: its node is blamed."""
    if signal.rule.name == RULE or not signal.key.startswith("node:") \
            or ctx.rules.klass(signal.rule.klass).group != "node" or signal.rule.weight < 3:
        return  # only a fault that names the hardware (not a blip, a drain) is blamed
    node = signal.key[len("node:"):]
    held = ctx.book.blamed.get(node)
    attempts = (*held[3], akey(key)) if held is not None and held[1] == inc_id else (akey(key),)
    ctx.book.blamed[node] = (signal, inc_id, time, tuple(dict.fromkeys(attempts)))


def reaching(ctx: Context, key: AttemptKey, time: datetime, on: str) -> list[Signal]:
    """The blame on the node a symptom was seen on (`on`), for another attempt that runs on
    it, as a candidate."""
    held = ctx.book.blamed.get(on) if on else None
    if held is None:
        return []
    signal, _, at, attempts = held
    attempt = ctx.book.attempt(key)
    if akey(key) in attempts or attempt is None or on not in attempt.nodes \
            or not timedelta(0) <= time - at <= timedelta(seconds=ctx.rules.blame_window_s):
        return []
    rule = SignalRule.model_validate({
        "name": RULE, "types": [signal.event.type], "class": signal.rule.klass,
        "weight": WEIGHT, "threshold": {"count": 10**9, "window_s": 0},
        "why": f"{signal.rule.why or signal.rule.klass}; {on} failed "
               f"{', '.join(attempts)} before"})
    return [Signal(signal.event, rule, signal.key, {key: ("node", on)})]


def recurring(ctx: Context, signal: Signal) -> bool:
    """Whether `signal` is the blamed fault again (its class, on the same part: the GPU, not
    only the node) reaching a later attempt of a job it failed: a crash loop on one bad GPU
    (each rerun fails on it, more than the group window apart) is one incident, however
    many attempts it takes. Another job failing of it is a recurrence (its own incident, a
    severity higher: `severity`)."""
    if not signal.key.startswith("node:") or not signal.event.entity:
        return False
    held = ctx.book.blamed.get(signal.key[len("node:"):])
    if held is None:
        return False
    cause, _, at, attempts = held
    if cause.rule.klass != signal.rule.klass or cause.event.entity != signal.event.entity \
            or not timedelta(0) <= signal.event.time - at <= timedelta(
                seconds=ctx.rules.blame_window_s):
        return False
    failed = {tuple(a.rsplit("/", 2)) for a in attempts}
    return any((project, job, str(n)) not in failed
               and any(p == project and j == job and int(m) < n for p, j, m in failed)
               for project, job, n in signal.reached)


def incident(ctx: Context, signal: Signal, time: datetime) -> str | None:
    """The incident that blamed the node, active again (reopened when it was resolved)."""
    book = ctx.book
    node = signal.key[len("node:"):]
    held = book.blamed.get(node)
    if held is None:
        return None
    inc = book.incidents[held[1]]
    if inc.status == "closed":
        return None
    if inc.status == "resolved":
        book.emit(inc.id, ev.Reopened(why=f"{node}, blamed for {', '.join(held[3])}, failed "
                                      "another attempt", event_id=signal.event.id),
                  time, RULE, f"reopen:{time.isoformat()}")
    book.open[signal.key] = inc.id
    book.resolved.pop(signal.key, None)
    return inc.id


def forget(ctx: Context) -> None:
    """Blame older than the window behind the watermark is dropped."""
    book = ctx.book
    if book.watermark is None:
        return
    horizon = book.watermark - timedelta(seconds=ctx.rules.blame_window_s)
    for node in [n for n, held in book.blamed.items() if held[2] < horizon]:
        del book.blamed[node]
