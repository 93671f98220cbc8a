"""The capacity report's inputs, read from the store and the topology file.

Waits are the caller's projects' only (`job_attempts` read with the projects bound: each
pending reason from its time to the next reason or the start, clipped to the window). The
cluster state behind them is the whole fleet's (GPUs held on each node by every project,
read without job or project; node outages): it decides causes and is never shown row by row.
An outage runs from the cluster's `node.drained` / `node.not_ready` to `node.ready` and cites
the incidents with evidence on that node from an hour before it to ten minutes after, of
those the caller may read (of its projects, or of none). A job's shape is its GPUs over
its nodes once started, else whole nodes (`min(gpus, GPUs per node)`); a one-leaf constraint
is not known from the events yet.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from jobtrail.reports.capacity import Allocation, Cluster, Node, Outage, Wait
from schemas.topology import TopologyFile


def nodes_of(topology: TopologyFile) -> dict[str, Node]:
    """Each node's GPUs and leaf (the switch of its first NIC)."""
    return {name: Node(spec.gpus, spec.nics[min(spec.nics)].switch if spec.nics else "")
            for name, spec in topology.nodes.items()}


def load(store: Any, topology: TopologyFile, projects: Sequence[str], since: datetime,
         until: datetime) -> tuple[Cluster, list[Wait]]:
    nodes = nodes_of(topology)
    per_node_default = max((n.gpus for n in nodes.values()), default=8) or 8
    live = ("(started_at IS NULL OR started_at >= {lo:DateTime64(3, 'UTC')} "
            "OR ended_at IS NULL OR ended_at >= {lo:DateTime64(3, 'UTC')})")
    allocations = [  # every project's, as GPUs held on nodes: no job, no project
        Allocation(n, r["share"], r["started_at"], r["ended_at"]) for r in store._dicts(
            "SELECT nodes, intDiv(gpus, length(nodes)) AS share, started_at, ended_at "
            f"FROM job_attempts FINAL WHERE started_at IS NOT NULL AND notEmpty(nodes) AND {live}",
            lo=since) for n in r["nodes"] if n in nodes]
    rows = store._dicts(
        "SELECT project, job_id, attempt, queue, gpus, nodes, started_at, ended_at, "
        "submitted_at, pending_reasons, pending_times FROM job_attempts FINAL "
        f"WHERE project IN {{projects:Array(String)}} AND {live}",
        lo=since, projects=list(projects))
    waits = []
    for r in rows:
        per_node = (r["gpus"] // len(r["nodes"]) if r["nodes"] and r["gpus"] else
                    min(r["gpus"], per_node_default))
        stop = r["started_at"] or r["ended_at"] or until
        times = [t if t.tzinfo else t.replace(tzinfo=UTC) for t in r["pending_times"]]
        for i, (reason, start) in enumerate(zip(r["pending_reasons"], times, strict=False)):
            end = times[i + 1] if i + 1 < len(times) else stop
            lo, hi = max(start, since), min(end, until)
            if hi > lo and r["gpus"]:
                waits.append(Wait(r["project"], r["queue"] or "default", r["job_id"],
                                  r["attempt"], reason, lo, hi, r["gpus"], per_node or 1))
    return Cluster(nodes, allocations, _outages(store, projects, since, until)), waits


def _outages(store: Any, projects: Sequence[str], since: datetime,
             until: datetime) -> list[Outage]:
    events = store._dicts(  # the cluster's own events (a project's are not an outage)
        "SELECT node, entity, type, time FROM events FINAL WHERE type IN "
        "('node.drained', 'node.not_ready', 'node.ready') AND project = '' "
        "AND time < {hi:DateTime64(3, 'UTC')} ORDER BY time, id", hi=until)
    incidents = store._dicts(  # citable: the caller's incidents and the cluster's
        "SELECT DISTINCT incident_id, splitByChar('/', entity)[1] AS node, time "
        "FROM incident_evidence FINAL WHERE time < {hi:DateTime64(3, 'UTC')} "
        "AND role != 'moved' AND incident_id IN (SELECT incident_id FROM incidents FINAL "
        "WHERE empty(projects) OR hasAny(projects, {projects:Array(String)}))",
        hi=until, projects=list(projects))
    open_: dict[str, datetime] = {}
    out: list[Outage] = []
    for e in events:
        node = e["node"] or e["entity"].split("/")[0]
        if e["type"] == "node.ready":
            if node in open_:
                out.append(Outage(node, open_.pop(node), e["time"]))
        else:
            open_.setdefault(node, e["time"])
    out += [Outage(n, t, None) for n, t in open_.items()]
    cited = []
    for o in out:
        if o.end is not None and o.end < since:
            continue
        ids = sorted(i["incident_id"] for i in incidents if i["node"] == o.node and
                     o.start - timedelta(hours=1) <= i["time"] <= o.start +
                     timedelta(minutes=10))
        cited.append(Outage(o.node, o.start, o.end, ",".join(ids)))
    return cited
