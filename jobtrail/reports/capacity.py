"""Capacity: why jobs waited, in GPU-hours per cause, per queue and project.

A wait is a pending interval of an attempt with the scheduler's reason (`job.pending`), its
GPUs and shape (`nodes` x `per_node` GPUs, optionally on one leaf switch). The reason names
the cause directly for priority, quota/fair-share, nodes down and image/data pulls. For
"Resources" the cluster's state decides, re-evaluated at every allocation or outage change
inside the interval, in this order:

1. `nodes_down`: the shape would fit if the drained or down nodes were back (the incidents
   on those nodes are cited);
2. `capacity`: fewer free GPUs in total than the job asks for;
3. `topology`: the shape fits across the cluster but not under one leaf, as the job requires;
4. `fragmentation`: enough free GPUs in total, scattered so that the shape fits nowhere;
5. `other`: it fits as far as the events tell (the scheduler knew of something they do not:
   a reservation, a node outside the topology file).

Fragmentation is measured for the job's shape: 1 - (free GPUs on nodes with at least
`per_node` free, counted in whole `per_node` slots) / (free GPUs). Waiting GPU-hours are the
interval's hours x the job's GPUs.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

CAUSES = ("capacity", "fragmentation", "topology", "quota", "priority", "nodes_down",
          "pulls", "other")


@dataclass(frozen=True)
class Node:
    gpus: int
    leaf: str = ""


@dataclass(frozen=True)
class Allocation:
    node: str
    gpus: int
    start: datetime
    end: datetime | None = None


@dataclass(frozen=True)
class Outage:
    node: str
    start: datetime
    end: datetime | None = None
    incident_id: str = ""


@dataclass(frozen=True)
class Wait:
    project: str
    queue: str
    job_id: str
    attempt: int
    reason: str
    start: datetime
    end: datetime
    gpus: int
    per_node: int
    one_leaf: bool = False

    @property
    def nodes(self) -> int:
        return -(-self.gpus // self.per_node) if self.per_node else 0


@dataclass(frozen=True)
class Fit:
    free: int
    usable: int
    fits: bool

    @property
    def fragmentation(self) -> float:
        return 1 - self.usable / self.free if self.free else 0.0


def fit(free: Mapping[str, int], per_node: int, nodes: int) -> Fit:
    """Whether `nodes` nodes with `per_node` free GPUs each exist, and the free GPUs the
    shape can use (whole `per_node` slots)."""
    total = sum(free.values())
    slots = sum(f // per_node for f in free.values()) if per_node else 0
    hosts = sum(1 for f in free.values() if per_node and f >= per_node)
    return Fit(total, slots * per_node, hosts >= nodes)


def reason_cause(reason: str) -> str | None:
    """The cause a scheduler reason names by itself (None: "Resources", decided by state)."""
    r = reason.lower()
    if r in ("resources", "resource", "unschedulable") or "insufficient" in r:
        return None
    if "priority" in r:
        return "priority"
    if any(k in r for k in ("qos", "assoc", "limit", "fairshare", "quota")):
        return "quota"
    if any(k in r for k in ("reqnodenotavail", "nodedown", "drain")):
        return "nodes_down"
    if any(k in r for k in ("image", "pull", "containercreating", "staging", "prolog")):
        return "pulls"
    return "other"


@dataclass
class Cluster:
    nodes: dict[str, Node]
    allocations: list[Allocation] = field(default_factory=list)
    outages: list[Outage] = field(default_factory=list)

    def _live(self, start: datetime, end: datetime | None, at: datetime) -> bool:
        return start <= at and (end is None or at < end)

    def free(self, at: datetime) -> tuple[dict[str, int], dict[str, int], list[Outage]]:
        """Free GPUs at `at` on nodes up, on nodes down (as if back), and the outages."""
        used: dict[str, int] = defaultdict(int)
        for a in self.allocations:
            if self._live(a.start, a.end, at):
                used[a.node] += a.gpus
        down = [o for o in self.outages if self._live(o.start, o.end, at)]
        down_nodes = {o.node for o in down}
        free = {n: max(0, spec.gpus - used[n]) for n, spec in self.nodes.items()}
        return ({n: f for n, f in free.items() if n not in down_nodes},
                {n: f for n, f in free.items() if n in down_nodes}, down)

    def changes(self, start: datetime, end: datetime) -> list[datetime]:
        points = {start}
        for t in [a.start for a in self.allocations] + [a.end for a in self.allocations if a.end]\
                + [o.start for o in self.outages] + [o.end for o in self.outages if o.end]:
            if start < t < end:
                points.add(t)
        return sorted(points)

    def cause(self, w: Wait, at: datetime) -> tuple[str, Fit, list[str]]:
        """Why a "Resources" wait could not start at `at`: cause, fit, incidents cited."""
        up, down, outages = self.free(at)
        now = fit(up, w.per_node, w.nodes)
        if down and not self._fits(w, up) and self._fits(w, {**up, **down}):
            cited = {i for o in outages if o.node in down for i in o.incident_id.split(",") if i}
            return "nodes_down", now, sorted(cited)
        if now.free < w.gpus:
            return "capacity", now, []
        if not now.fits:
            return "fragmentation", now, []
        if not self._fits(w, up):
            return "topology", now, []
        return "other", now, []

    def _fits(self, w: Wait, free: Mapping[str, int]) -> bool:
        if not w.one_leaf:
            return fit(free, w.per_node, w.nodes).fits
        leaves: dict[str, dict[str, int]] = defaultdict(dict)
        for n, f in free.items():
            leaves[self.nodes[n].leaf][n] = f
        return any(fit(group, w.per_node, w.nodes).fits for group in leaves.values())


@dataclass(frozen=True)
class Slice:
    wait: Wait
    start: datetime
    end: datetime
    cause: str
    fragmentation: float = 0.0
    incidents: tuple[str, ...] = ()

    @property
    def gpu_hours(self) -> float:
        return self.wait.gpus * (self.end - self.start).total_seconds() / 3600


def attribute(cluster: Cluster, waits: Sequence[Wait]) -> list[Slice]:
    """Every wait cut where its cause can change, each piece with its cause."""
    out: list[Slice] = []
    for w in waits:
        named = reason_cause(w.reason)
        if named is not None:
            out.append(Slice(w, w.start, w.end, named))
            continue
        points = cluster.changes(w.start, w.end)
        for a, b in zip(points, [*points[1:], w.end], strict=True):
            cause, f, incidents = cluster.cause(w, a)
            prev = out[-1] if out else None
            if prev is not None and prev.wait is w and prev.cause == cause and \
                    prev.incidents == tuple(incidents) and prev.fragmentation == f.fragmentation:
                out[-1] = Slice(w, prev.start, b, cause, f.fragmentation, tuple(incidents))
            else:
                out.append(Slice(w, a, b, cause, f.fragmentation, tuple(incidents)))
    return out


def summary(slices: Sequence[Slice]) -> dict[tuple[str, str], dict[str, float]]:
    """Waiting GPU-hours per (queue, project) and cause."""
    out: dict[tuple[str, str], dict[str, float]] = {}
    for s in slices:
        row = out.setdefault((s.wait.queue, s.wait.project), dict.fromkeys(CAUSES, 0.0))
        row[s.cause] += s.gpu_hours
    return dict(sorted(out.items()))


def biggest(slices: Sequence[Slice]) -> tuple[str, float]:
    """The cause with the most waiting GPU-hours (ties: the order of CAUSES)."""
    totals = dict.fromkeys(CAUSES, 0.0)
    for s in slices:
        totals[s.cause] += s.gpu_hours
    name = max(CAUSES, key=lambda c: (totals[c], -CAUSES.index(c)))
    return name, totals[name]


def markdown(slices: Sequence[Slice], *, title: str) -> str:
    """The weekly capacity report: GPU-hours waited per queue, project and cause."""
    table = summary(slices)
    cause, hours = biggest(slices)
    total = sum(s.gpu_hours for s in slices)
    lines = [f"# {title}", "",
             f"Jobs waited {total:.1f} GPU-hours; the biggest constraint is **{cause}** "
             f"({hours:.1f} GPU-hours, {hours / total if total else 0:.0%}).", "",
             "| queue | project | " + " | ".join(CAUSES) + " |",
             "|---|---|" + "---:|" * len(CAUSES)]
    for (queue, project), row in table.items():
        lines.append(f"| {queue} | {project} | " +
                     " | ".join(f"{row[c]:.1f}" for c in CAUSES) + " |")
    frag = [s for s in slices if s.cause == "fragmentation"]
    if frag:
        lines += ["", "Fragmentation while jobs waited for it: " + ", ".join(
            f"{s.wait.job_id} {s.fragmentation:.0%} of free GPUs unusable for "
            f"{s.wait.nodes}x{s.wait.per_node}" for s in frag) + "."]
    down = sorted({i for s in slices for i in s.incidents})
    if down:
        lines += ["", "Nodes down behind the waits: incidents " + ", ".join(down) + "."]
    return "\n".join(lines) + "\n"
