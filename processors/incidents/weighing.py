"""The strongest evidence wins, not the earliest: the candidate causes of a job symptom,
weighed.

Every signal that reached the attempt's fault domain in the cause window is a candidate
(one per faulty entity: its signals count once), unless its node was declared ready again
between the signal and the attempt's start (a fault over before the attempt began). Its score is

    specificity   the signal rule's `weight`: 3 names the fault (an Xid with a recovery
                  action, a port down, an I/O error), 1 a counter tick or a blip that is
                  itself a symptom (a node not responding), 2 otherwise
    + agreement   2 when the job's own message says the same class (an I/O error in the
                  failure text and an I/O error on its filesystem)
    + breadth     1 for each other attempt already failing or struggling that the same
                  entity reached in the window, at most 2 (an MDS stall behind three jobs'
                  symptoms beats a counter on one job's leaf)

and ties go to the closer relation (the node itself before its leaf), then to the earlier
signal. The job's own message wins
over a weak candidate (score 1, another class) when the symptom names its class
unmistakably (rank 70 and above: an OOM kill, a data loader killed, an ECC error, a
segfault). The
explanation lists every candidate considered and why each lost.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from processors.incidents import blame, changes
from processors.incidents.book import AttemptKey, Signal, node_of
from processors.incidents.rules import SymptomRule

if TYPE_CHECKING:
    from processors.incidents.context import Context

CONFIDENCE = {"self": 0.9, "node": 0.9, "gpu": 0.9, "nic": 0.85, "rank": 0.85, "client": 0.85,
              "switch": 0.6,
              "target": 0.6, "filesystem": 0.6, "path": 0.6, "queue": 0.5, "change": 0.4}
MAX_BREADTH = 2
OWN_RANK = 70
"""A symptom ranked this high names its class itself (OOM, data loader, ECC, GPU lost, a
segfault or an illegal memory access), unlike an NCCL timeout or a bare failure."""


@dataclass(frozen=True)
class Candidate:
    signal: Signal
    relation: str
    path: str
    score: int
    reasons: tuple[str, ...]

    @property
    def entity(self) -> str:
        event = self.signal.event
        return changes.name(self.signal) or event.entity or event.node or self.signal.key

    def order(self) -> tuple[int, float, datetime, str]:
        return (-self.score, -CONFIDENCE.get(self.relation, 0.5), self.signal.event.time,
                self.signal.event.id)

    def describe(self) -> str:
        return f"{self.entity} {self.signal.event.type} (score {self.score}: " \
               f"{', '.join(self.reasons)})"


def candidates(ctx: Context, key: AttemptKey, time: datetime, since: datetime | None = None,
               node: str = "", rule: SymptomRule | None = None,
               on: str = "") -> list[Candidate]:
    """The candidate causes of a symptom of `key` at `time` (seen on node `on`), best
    first."""
    lo = since or time - timedelta(seconds=ctx.rules.cause_window_s)
    hi = time + timedelta(seconds=ctx.rules.cause_slack_s)
    progress = ctx.book.progress.get(key)
    bounds = progress.uncertain if progress is not None else None
    if bounds is not None and bounds[0] <= time <= bounds[1]:
        hi = max(hi, bounds[1] + timedelta(seconds=ctx.rules.cause_slack_s))
    attempt = ctx.book.attempt(key)
    started = attempt.started_at if attempt is not None else None
    window = [s for s in ctx.book.signals if lo <= s.event.time <= hi
              and changes.applies(s, started)]
    if not node:
        window += changes.reaching(ctx, key, time, started)
    first: dict[str, Signal] = {}
    for signal in window:
        if key not in signal.reached or (node and (signal.event.node or "") != node):
            continue
        on = signal.event.node or node_of(signal.event.entity or "")
        if started is not None and on and signal.rule.klass != changes.KLASS \
                and ctx.book.cleared(on, signal.event.time, started):
            continue  # the node was back (ready) before the attempt started on it
        held = first.get(signal.key)
        if held is None or signal.rule.weight > held.rule.weight or (
                signal.rule.weight == held.rule.weight and signal.event.time < held.event.time):
            first[signal.key] = signal
    for blamed in blame.reaching(ctx, key, time, on):
        if blamed.key not in first:  # a fresh signal of the node's wins over its old blame
            first[blamed.key] = blamed
            window.append(blamed)
    if not first:
        return []
    weight = {group: signal.rule.weight for group, signal in first.items()}
    for group, signal in list(first.items()):
        # the two ends of one link (the NIC's port down, its switch port's error counters)
        # are one fault: named by the switch port, as strong as its strongest end
        far = _switch_end(ctx, signal)
        for other in window:
            if other.key == group and far and other.event.entity in far \
                    and key in other.reached:
                first[group] = other
                break
    struck = set(ctx.book.by_attempt) | {k for k, _ in ctx.book.symptom_counts}
    out = []
    for group, signal in first.items():
        relation, path = signal.reached[key]
        reasons = [f"specificity {weight[group]}"]
        score = weight[group]
        if signal.event.time > time + timedelta(seconds=ctx.rules.cause_slack_s):
            reasons.append("after the symptom's placed time, inside its line's interval: "
                           "the order is uncertain")
        if rule is not None and rule.klass == signal.rule.klass:
            score += 2
            reasons.append("the job's own message says the same")
        others = {a for s in window if s.key == group for a in s.reached
                  if a != key and a in struck}
        if others:
            score += min(MAX_BREADTH, len(others))
            reasons.append(f"also behind {len(others)} other failing attempt"
                           f"{'s' if len(others) > 1 else ''}")
        out.append(Candidate(signal, relation, path, score, tuple(reasons)))
    return sorted(out, key=Candidate.order)


def _switch_end(ctx: Context, signal: Signal) -> set[str]:
    """The switch-port names of a NIC event's cabled end (from its `switch`/`port`
    attributes, else the topology at its time); empty for any other event."""
    event = signal.event
    if event.scope != "nic" or not event.node:
        return set()
    ends: list[tuple[str, str]] = []
    switch, port = event.attributes.get("switch"), event.attributes.get("port")
    if isinstance(switch, str) and isinstance(port, (str, int)):
        ends.append((switch, str(port)))
    nic = (event.entity or "").removeprefix(f"{event.node}/")
    ends += [(link.switch, link.port) for link in ctx.topology().links_of(event.node, event.time)
             if link.nic == nic]
    return {name for s, p in ends for name in (f"{s}/{p}", f"{s}/p{p.removeprefix('p')}")}


def own_wins(best: Candidate, rule: SymptomRule, explains: Sequence[str] = ()) -> bool:
    """The job's own message beats a weak candidate of another class; a change before the
    attempt never explains a symptom that names a class a change does not cause (`explains`:
    the rules' `change_explains`), an OOM or an ECC error."""
    if best.signal.rule.klass == changes.KLASS:
        return rule.rank >= OWN_RANK and rule.klass not in explains
    return rule.rank >= OWN_RANK and best.score <= 1 and rule.klass != best.signal.rule.klass


def losers(ranked: list[Candidate], chosen: Candidate | None) -> str:
    """' Candidates that lost: ...' for the explanation ('' when there was one)."""
    lost = [c for c in ranked if c is not chosen]
    if not lost:
        return ""
    parts = []
    for c in lost[:4]:
        if chosen is None:
            why = "too weak against the job's own message"
        elif c.score < chosen.score:
            why = f"weaker than {chosen.score}"
        else:
            why = "later"
        parts.append(f"{c.describe()}: {why}")
    more = f"; and {len(lost) - 4} more" if len(lost) > 4 else ""
    return " Candidates that lost: " + "; ".join(parts) + more + "."
