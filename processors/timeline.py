"""`job_timeline` rows: one per (job, attempt, event), including attributed infrastructure.

A job-scoped event lands on its own job (`relation = self`). An infrastructure event lands on
every attempt whose fault domain held the entity at the event's time: the node (and the GPUs,
NICs and ranks on it) or a filesystem the attempt mounts. The index is keyed by entity, so an
event costs a lookup, not a scan over all jobs. Switch-level attribution through the fabric
topology builds on this index (issue 4).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from processors.attempts import Attempt
from processors.topology import Topology
from schemas.events import Event, Scope


@dataclass(frozen=True)
class TimelineRow:
    project: str
    job_id: str
    attempt: int
    event: Event
    relation: str
    entity: str
    link_path: str


@dataclass(frozen=True)
class Span:
    project: str
    job_id: str
    attempt: int
    start: datetime
    end: datetime | None

    def covers(self, time: datetime, slack: timedelta) -> bool:
        if time < self.start - slack:
            return False
        return self.end is None or time <= self.end + slack


def filesystem_of(mount: str) -> str:
    """Mounts are `filesystem` or `filesystem:/path`; the filesystem is the fault domain."""
    return mount.split(":", 1)[0]


AttemptKey = tuple[str, str, int]


class Membership:
    """Entity -> attempt spans, rebuilt from attempts; mutated only through `update`.

    Keys are `node:NAME`, `fs:NAME` (from mounts) and `queue:NAME`. Node and filesystem spans
    run from the attempt's start; a queue span from its submission, because a queue event
    (a policy change, a reclaim) matters to a job that is still waiting.
    """

    def __init__(self, slack: timedelta = timedelta(seconds=30)) -> None:
        self.slack = slack
        self._index: dict[str, dict[AttemptKey, Span]] = defaultdict(dict)
        self._placed: dict[AttemptKey, tuple[tuple[str, ...], datetime | None]] = {}

    def update(self, attempt: Attempt) -> None:
        key = (attempt.project, attempt.job_id, attempt.attempt)
        self._remove(key)
        entries: dict[str, Span] = {}
        if attempt.started_at is not None:
            span = Span(*key, attempt.started_at, attempt.ended_at)
            entries.update({f"node:{n}": span for n in attempt.nodes})
            entries.update({f"fs:{filesystem_of(m)}": span for m in attempt.mounts})
        since = attempt.submitted_at or attempt.started_at
        if attempt.queue and since is not None:
            entries[f"queue:{attempt.queue}"] = Span(*key, since, attempt.ended_at)
        for index_key, span in entries.items():
            self._index[index_key][key] = span
        if entries:
            self._placed[key] = (tuple(entries), attempt.ended_at)

    def _remove(self, key: AttemptKey) -> None:
        index_keys, _ = self._placed.pop(key, ((), None))
        for index_key in index_keys:
            spans = self._index.get(index_key)
            if spans is not None:
                spans.pop(key, None)
                if not spans:
                    del self._index[index_key]

    def prune(self, cutoff: datetime) -> int:
        """Forget attempts that ended before `cutoff` (beyond the lateness window)."""
        gone = [k for k, (_, end) in self._placed.items()
                if end is not None and end + self.slack < cutoff]
        for key in gone:
            self._remove(key)
        return len(gone)

    def _covering(self, index_key: str, time: datetime) -> list[Span]:
        spans = self._index.get(index_key)
        if not spans:
            return []
        return [spans[k] for k in sorted(spans) if spans[k].covers(time, self.slack)]

    def on_node(self, node: str, time: datetime) -> list[Span]:
        return self._covering(f"node:{node}", time)

    def started_after(self, node: str, time: datetime) -> list[Span]:
        """Attempts on `node` that started after `time` (beyond the slack): a change applied
        before them is theirs though no span covers it."""
        spans = self._index.get(f"node:{node}")
        if not spans:
            return []
        return [spans[k] for k in sorted(spans) if spans[k].start - self.slack > time]

    def on_filesystem(self, filesystem: str, time: datetime) -> list[Span]:
        return self._covering(f"fs:{filesystem}", time)

    def on_queue(self, queue: str, time: datetime) -> list[Span]:
        return self._covering(f"queue:{queue}", time)


_NODE_SCOPES = {Scope.node, Scope.gpu, Scope.nic, Scope.rank}
_STORAGE_SCOPES = {Scope.filesystem, Scope.target, Scope.path}
# most specific first: one row per (attempt, event), with the closest link
_RANK = {"node": 0, "gpu": 0, "nic": 0, "rank": 0, "change": 0, "client": 0, "switch": 1,
         "target": 2, "filesystem": 2, "queue": 3}


def event_filesystem(event: Event, topology: Topology | None) -> str:
    named = event.attributes.get("filesystem")
    if isinstance(named, str) and named:
        return named
    if event.scope == Scope.filesystem and event.entity:
        return event.entity
    if topology is not None:
        for candidate in (event.attributes.get("target"), event.entity):
            if isinstance(candidate, str) and candidate:
                found = topology.filesystem_of_target(candidate)
                if found:
                    return found
    # a Lustre client's line names the filesystem by its fsname (`scratch-OST0005`): the
    # filesystem when the topology does not map the target
    fsname = event.attributes.get("fsname")
    return fsname if isinstance(fsname, str) and event.scope in _STORAGE_SCOPES else ""


def event_switch(event: Event) -> tuple[str, str]:
    """(switch, port) an infrastructure event names, from attributes or its scope."""
    switch = event.attributes.get("switch")
    port = event.attributes.get("port")
    if event.scope == Scope.switch and event.entity:
        switch = switch or event.entity
    if event.scope == Scope.port and event.entity and "/" in event.entity:
        name, _, number = event.entity.partition("/")
        switch, port = switch or name, port or number
    return (switch if isinstance(switch, str) else "", port if isinstance(port, str) else "")


def event_node(event: Event) -> str:
    if event.node:
        return event.node
    return event.entity or "" if event.scope == Scope.node else ""


def change_nodes(event: Event) -> list[str]:
    """The nodes a change was applied to: its `nodes` attribute (a rollout), and its node."""
    listed = event.attributes.get("nodes")
    if isinstance(listed, list):
        return sorted({*(str(n) for n in listed), *([event.node] if event.node else [])})
    node = event_node(event)
    return [node] if node else []


def change_rows(event: Event, attempt: Attempt) -> list[TimelineRow]:
    """The row of a change applied to nodes before `attempt` started on them (a driver, an
    image, an NCCL rollout): the attempt ran under it, though no span of the attempt covers
    the change's time. One row, by the first of the attempt's nodes the change names."""
    if not event.type.startswith("change.") or attempt.started_at is None \
            or event.time >= attempt.started_at:
        return []
    shared = [n for n in change_nodes(event) if n in set(attempt.nodes)]
    if not shared:
        return []
    entity = event.entity or shared[0]
    path = f"{entity} → {shared[0]}" if entity != shared[0] else shared[0]
    return [TimelineRow(attempt.project, attempt.job_id, attempt.attempt, event, "change",
                        entity, path)]


def _hops(event: Event, topology: Topology | None) -> list[tuple[str, str, str, str]]:
    """(node, relation, entity, path) for every node the event reaches, most specific first."""
    change = event.type.startswith("change.")
    node = event_node(event)
    if change and isinstance(event.attributes.get("nodes"), list):
        # a rollout names its nodes: each of them is under the change
        return [(n, "change", event.entity or n,
                 f"{event.entity} → {n}" if event.entity and event.entity != n else n)
                for n in change_nodes(event)]
    if node and (event.scope in _NODE_SCOPES or event.scope is None):
        relation = "node" if event.scope in (None, Scope.node) else event.scope.value
        entity = event.entity or node
        path = f"{entity} → {node}" if entity != node else node
        return [(node, "change" if change else relation, entity, path)]
    if node and event.scope in _STORAGE_SCOPES:
        # a storage client's own report (a Lustre client's `rc = -28` against an OST, NFS
        # "not responding", its own /scratch filling up) happened on that node: its attempts
        # there are reached through the node whether or not the topology maps the target or
        # they declared their mounts; the filesystem's other attempts through the filesystem
        entity = event.entity or node
        return [(node, "change" if change else "client", entity, f"{entity} → {node}")]
    switch, port = event_switch(event)
    if not switch or topology is None:
        return []
    entity = f"{switch}/{port}" if port else switch
    hops = []
    for link, prefix in topology.under(switch, event.time):
        direct = bool(port) and link.switch == switch and link.port == port
        relation = "change" if change else ("nic" if direct else "switch")
        head = f"{switch}/{port}" if direct else prefix
        hops.append((link.node, relation, entity, f"{head} → {link.node}"))
    hops.sort(key=lambda h: (_RANK[h[1]], h[0]))
    return hops


def _reached(event: Event, spans: list[Span]) -> list[Span]:
    """The attempts a job-less event reaches where it happened: every project's, for an
    infrastructure event (no project: only an @infra or operator credential writes those);
    only its own project's for an event a project wrote. A tenant's token may report what
    it saw on a node its job ran on; that never reaches another tenant's job, its timeline
    or the cause of its incident."""
    return spans if not event.project else [s for s in spans if s.project == event.project]


def rows_for(event: Event, membership: Membership, attempt_of_job: int | None,
             topology: Topology | None = None) -> list[TimelineRow]:
    """Timeline rows for one event; `attempt_of_job` resolves job events without an attempt."""
    if event.job_id:
        # no attempt from the producer: the attempt running then, else the first one
        attempt = event.attempt if event.attempt is not None else (attempt_of_job or 1)
        entity = event.entity or event.node or ""
        return [TimelineRow(event.project, event.job_id, attempt, event, "self", entity, "")]
    best: dict[tuple[str, str, int], TimelineRow] = {}
    for node, relation, entity, path in _hops(event, topology):
        for span in _reached(event, membership.on_node(node, event.time)):
            key = (span.project, span.job_id, span.attempt)
            if key not in best:
                best[key] = TimelineRow(*key, event, relation, entity, path)
    if event.type.startswith("change."):
        # attempts that started on the changed nodes after the change ran under it
        for node in change_nodes(event):
            entity = event.entity or node
            path = f"{entity} → {node}" if entity != node else node
            for span in _reached(event, membership.started_after(node, event.time)):
                key = (span.project, span.job_id, span.attempt)
                if key not in best:
                    best[key] = TimelineRow(*key, event, "change", entity, path)
    filesystem = event_filesystem(event, topology)
    if filesystem and (event.scope in _STORAGE_SCOPES or event.scope is None):
        relation = "target" if event.scope == Scope.target else "filesystem"
        if event.type.startswith("change."):
            relation = "change"
        entity = event.entity or filesystem
        path = f"{entity} → {filesystem}" if entity != filesystem else filesystem
        for span in _reached(event, membership.on_filesystem(filesystem, event.time)):
            key = (span.project, span.job_id, span.attempt)
            if key not in best:
                best[key] = TimelineRow(*key, event, relation, entity, path)
    if event.scope == Scope.queue and event.entity:
        relation = "change" if event.type.startswith("change.") else "queue"
        for span in _reached(event, membership.on_queue(event.entity, event.time)):
            key = (span.project, span.job_id, span.attempt)
            if key not in best:
                best[key] = TimelineRow(*key, event, relation, event.entity,
                                        f"{event.entity} → {span.job_id}")
    return [best[k] for k in sorted(best)]


def lookup_keys(event: Event, topology: Topology | None) -> list[str]:
    """The entity keys an unattributed event waits under (for late-starting attempts)."""
    keys: list[str] = []
    node = event_node(event)
    if event.type.startswith("change.") and isinstance(event.attributes.get("nodes"), list):
        keys.extend(f"node:{n}" for n in change_nodes(event))
    elif node:
        keys.append(f"node:{node}")
    else:
        switch, _ = event_switch(event)
        if switch:
            keys.append(f"switch:{switch}")
    filesystem = event_filesystem(event, topology)
    if filesystem:
        keys.append(f"fs:{filesystem}")
    if event.scope == Scope.queue and event.entity:
        keys.append(f"queue:{event.entity}")
    return keys
