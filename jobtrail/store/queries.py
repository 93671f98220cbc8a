"""Membership, fabric and data-path questions an on-call engineer asks (issue 4).

"Which attempts were on node X / under switch Y / using filesystem Z at time T", "what are the
nodes, switches, filesystems and checkpoints of attempt N", "what happened on entity E".
The wiring comes from the topology file plus every stored `topology.link` event, so a question
about last Tuesday uses last Tuesday's cables.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from jobtrail.store import Store
from processors.attempts import Attempt
from processors.timeline import filesystem_of
from processors.topology import Topology


def wiring(store: Store, base: Topology) -> Topology:
    """The base topology with every stored `topology.link` change applied, in time order."""
    for event in store.recent_infra_events(0):
        base.apply(event)
    return base


def attempts_under(store: Store, topology: Topology, projects: Sequence[str], at: datetime, *,
                   node: str = "", switch: str = "", filesystem: str = "",
                   cluster: str = "") -> list[Attempt]:
    nodes = [node] if node else []
    if switch:
        nodes.extend(sorted({link.node for link, _ in topology.under(switch, at)}))
    if not nodes and not filesystem:
        return []
    return store.attempts_at(projects, at, nodes=nodes, filesystem=filesystem, cluster=cluster)


@dataclass
class AttemptResources:
    attempt: Attempt
    switches: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    filesystems: list[str] = field(default_factory=list)
    checkpoints: list[dict[str, Any]] = field(default_factory=list)


def resources(store: Store, topology: Topology, project: str, job_id: str,
              attempt: int) -> AttemptResources | None:
    found = [a for a in store.attempts(project, job_id) if a.attempt == attempt]
    if not found:
        return None
    a = found[0]
    at = a.started_at
    links = [] if at is None else [link for n in a.nodes for link in topology.links_of(n, at)]
    return AttemptResources(
        attempt=a,
        switches=sorted({s for n in a.nodes for s in topology.switches_of(n, at)}) if at else [],
        links=[f"{link.node}/{link.nic} → {link.switch}/{link.port}" for link in links],
        filesystems=sorted({filesystem_of(m) for m in a.mounts}),
        checkpoints=store.checkpoints(project, job_id, attempt),
    )


def attempts_on(store: Store, projects: Sequence[str], *, nodes: Sequence[str] = (),
                filesystem: str = "", limit: int = 500) -> list[Attempt]:
    """Every attempt of `projects`, at any time, on any of `nodes` or mounting `filesystem`
    (an entity's history across the jobs it served), oldest first."""
    from jobtrail.store.rows import ATTEMPT_COLUMNS, attempt_from_row

    if not projects or not (nodes or filesystem):
        return []
    rows = store._dicts(
        f"SELECT {', '.join(ATTEMPT_COLUMNS)} FROM job_attempts FINAL "
        "WHERE project IN {projects:Array(String)} "
        "AND (hasAny(nodes, {nodes:Array(String)}) OR ({fs:String} != '' AND "
        "arrayExists(m -> splitByChar(':', m)[1] = {fs:String}, mounts))) "
        "ORDER BY started_at, project, job_id, attempt LIMIT {limit:UInt32}",
        projects=list(projects), nodes=list(nodes), fs=filesystem, limit=limit)
    return [attempt_from_row(r) for r in rows]


def known_projects(store: Store) -> list[str]:
    """Every project with an attempt (an operator's `all`)."""
    return [str(r[0]) for r in store._q(
        "SELECT DISTINCT project FROM job_attempts FINAL ORDER BY project").result_rows]
