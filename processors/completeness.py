"""What the timeline does not have: per attempt, which sources were expected and which
reported, and the gaps between the two (pure: facts in, an assessment out).

A source is a stream: the scheduler about the attempt, each node's kernel log, each rank's
log, the fabric (the attempt's switches and NICs), storage (its filesystems and targets),
alerts. What a stream sent is measured from the stored events (`Heard`: how many, first,
last, the last event's id); what is expected is measured too, never assumed:

- the scheduler always reports an attempt it placed;
- ranks: the ranks the scheduler placed (`job.started` `ranks`), else those the attempt's own
  logging pattern implies: the ranks that logged, their stride (every rank, or one per node:
  gcd of the rank numbers) up to the world size (its GPUs). A job where only rank 0 logs
  expects rank 0 only;
- a node-level source (the kernel log) is expected on every node of the attempt when it
  reported from at least half of them: a node it never came from is a gap, a node it went
  quiet on is a gap; a source that only ever spoke from one node of 64 (an Xid) is sparse,
  shown, never a gap;
- a stream (a rank, a node's log) `stopped` when its last word came more than `gap_s`
  before the attempt's end while a peer (another rank, another node, the same source
  elsewhere in the cluster) still spoke after that point: the stream went quiet, not the
  world;
- a source is `silent cluster-wide` when it has a measured pulse in the cluster (it spoke in
  every `gap_s`-long span of the `SPANS` before the attempt's end but the last) and nothing
  came from it in the last `gap_s`: a source that speaks in bursts has no pulse to miss.

The fabric and storage sources the topology names usually speak only on a fault: they are
listed with what they said (or that they said nothing), not counted as gaps unless their
cadence says they should have spoken.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

GAP_S = 20 * 60.0
"""A stream quiet this long before the attempt's end, while its peers spoke, has a gap."""
SPANS = 6
"""How many spans of `gap_s` before the end a cluster-wide source's pulse is read over."""
KINDS = ("scheduler", "rank log", "node log", "fabric", "storage", "alerts")


@dataclass(frozen=True)
class Heard:
    """What one stream sent in the window."""

    kind: str
    """One of KINDS."""
    key: str
    """The node, rank, switch or filesystem ('' for the attempt's scheduler, a source's
    cluster-wide stream)."""
    count: int = 0
    first: datetime | None = None
    last: datetime | None = None
    last_event: str = ""
    source: str = ""
    buckets: frozenset[int] = frozenset()
    """For a cluster-wide stream: which `gap_s`-long spans before the end it spoke in (0 is
    the last one before the end, 1 the one before it, ...)."""


@dataclass(frozen=True)
class Facts:
    """What the store says about one attempt's sources."""

    start: datetime
    end: datetime
    """The attempt's end (its failure), or the newest time it was seen running."""
    nodes: Sequence[str]
    gpus: int = 0
    ranks: Sequence[str] = ()
    """Ranks the scheduler placed (`rank-N`), when it said."""
    heard: Sequence[Heard] = ()
    """The attempt's own streams (its timeline rows, grouped)."""
    cluster: Sequence[Heard] = ()
    """Each source's cluster-wide stream over the `SPANS` spans of `gap_s` before the end
    (key ''), with the spans it spoke in."""
    named: Sequence[tuple[str, str]] = ()
    """(kind, key) the topology and mounts name: switches, filesystems."""
    gap_s: float = GAP_S


@dataclass(frozen=True)
class Stream:
    kind: str
    key: str
    status: str
    """`reported`, `stopped`, `never`, `silent` (cluster-wide), or `sparse` / `quiet`
    (not expected to speak: shown, no gap)."""
    heard: Heard
    why: str = ""


@dataclass(frozen=True)
class Assessment:
    streams: list[Stream] = field(default_factory=list)
    gaps: list[Stream] = field(default_factory=list)
    expected: dict[str, list[str]] = field(default_factory=dict)
    """Per kind, the keys expected to report."""

    @property
    def complete(self) -> bool:
        return not self.gaps


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min"


def _rank(key: str) -> int | None:
    number = key.removeprefix("rank-")
    return int(number) if number.isdigit() and key.startswith("rank-") else None


def expected_ranks(logged: Sequence[str], gpus: int, placed: Sequence[str] = ()) -> list[str]:
    """The ranks expected to log: of the world (the ranks the scheduler placed, else its
    GPUs), those the attempt's logging pattern covers: every `stride`-th rank, the stride
    being the gcd of the ranks that logged (1: every rank logs; 8: one per node); only
    rank 0 when it alone logged."""
    numbers = sorted({n for n in map(_rank, logged) if n is not None})
    if not numbers:
        return []
    if len(numbers) == 1:
        return [f"rank-{numbers[0]}"]
    stride = 0
    for n in numbers:
        stride = math.gcd(stride, n)
    stride = stride or 1
    world = sorted({n for n in map(_rank, placed) if n is not None}) or \
        list(range(max(gpus, numbers[-1] + 1)))
    return [f"rank-{n}" for n in world if n % stride == 0][:100_000]


def assess(facts: Facts) -> Assessment:
    """Every stream of the attempt with its status, and the gaps among them."""
    cutoff = facts.end - timedelta(seconds=facts.gap_s)
    by_kind: dict[str, dict[str, Heard]] = {}
    for h in facts.heard:
        by_kind.setdefault(h.kind, {})[h.key] = h
    cluster = {h.source or h.kind: h for h in facts.cluster}
    streams: list[Stream] = []
    expected: dict[str, list[str]] = {}

    def judge(kind: str, keys: Sequence[str], what: str, source: str) -> None:
        heard = by_kind.get(kind, {})
        elsewhere = cluster.get(source)
        for key in keys:
            h = heard.get(key) or Heard(kind, key, source=source)
            peers = [p for k, p in heard.items() if k != key and p.last and p.last > cutoff]
            if elsewhere is not None and elsewhere.last is not None and elsewhere.last > cutoff:
                peers.append(elsewhere)
            if h.count == 0:
                streams.append(Stream(kind, key, "never", h, f"{what} {key} never reported "
                                      f"during the attempt"))
            elif h.last is not None and h.last < cutoff and peers:
                quiet = (facts.end - h.last).total_seconds()
                streams.append(Stream(kind, key, "stopped", h,
                                      f"{what} {key} stopped {_minutes(quiet)} before the "
                                      f"attempt's end at {facts.end.isoformat()} (its last "
                                      f"event {h.last_event}), while "
                                      f"{len(peers)} other stream(s) still reported"))
            else:
                streams.append(Stream(kind, key, "reported", h))

    sched = by_kind.get("scheduler", {})
    expected["scheduler"] = [""]
    judge("scheduler", [""], "the scheduler", "scheduler")
    if not sched:
        streams[-1] = Stream("scheduler", "", "never", Heard("scheduler", ""),
                             "the scheduler never reported the attempt")

    logged = sorted(by_kind.get("rank log", {}))
    ranks = expected_ranks(logged, facts.gpus, facts.ranks)
    expected["rank log"] = ranks
    judge("rank log", ranks, "rank log of", "job")
    for key in logged:
        if key not in ranks:
            streams.append(Stream("rank log", key, "reported", by_kind["rank log"][key]))

    nodes = list(facts.nodes)
    reporting = [n for n in nodes if n in by_kind.get("node log", {})]
    if nodes and len(reporting) * 2 >= len(nodes) and reporting:
        expected["node log"] = nodes
        judge("node log", nodes, "the node log of", "node")
    else:
        expected["node log"] = []
        for n in nodes:
            said = by_kind.get("node log", {}).get(n)
            if said is not None:
                streams.append(Stream("node log", n, "sparse", said,
                                      f"the node log spoke from {len(reporting)} of "
                                      f"{len(nodes)} nodes: it reports faults, not a pulse"))
    for kind, key in facts.named:
        h = by_kind.get(kind, {}).get(key) or Heard(kind, key)
        streams.append(Stream(kind, key, "reported" if h.count else "quiet", h,
                              "" if h.count else f"{kind} {key} said nothing during the "
                              "attempt (it reports faults)"))
    named = set(facts.named)
    for kind in ("fabric", "storage", "alerts"):
        for key, h in sorted(by_kind.get(kind, {}).items()):
            if (kind, key) not in named:
                streams.append(Stream(kind, key, "reported", h))

    pulse = frozenset(range(1, SPANS))
    for h in facts.cluster:
        source = h.source or h.kind
        if h.last is None or 0 in h.buckets or not pulse <= h.buckets:
            continue
        quiet = (facts.end - h.last).total_seconds()
        streams.append(Stream(h.kind, f"cluster:{source}", "silent", h,
                              f"{source} went silent cluster-wide {_minutes(quiet)} before the "
                              f"attempt's end, having spoken in each of the {SPANS - 1} "
                              f"{_minutes(facts.gap_s)} spans before (last event "
                              f"{h.last_event})"))
    gaps = [s for s in streams if s.status in ("never", "stopped", "silent")]
    return Assessment(streams, gaps, expected)


def caveat(assessment: Assessment, limit: int = 3) -> str:
    """The note a diagnosis carries when the attempt's evidence has gaps ('' when none)."""
    if not assessment.gaps:
        return ""
    said = [g.why for g in assessment.gaps[:limit]]
    more = len(assessment.gaps) - len(said)
    tail = f"; and {more} more gap(s)" if more > 0 else ""
    return ("The cause rests on incomplete evidence: " + "; ".join(said) + tail + ".")
