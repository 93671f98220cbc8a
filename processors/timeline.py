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


class Membership:
    """entity -> attempt spans, rebuilt from attempts; mutated only through `update`."""

    def __init__(self, slack: timedelta = timedelta(seconds=30)) -> None:
        self.slack = slack
        self._nodes: dict[str, dict[tuple[str, str, int], Span]] = defaultdict(dict)
        self._filesystems: dict[str, dict[tuple[str, str, int], Span]] = defaultdict(dict)
        self._placed: dict[tuple[str, str, int], tuple[tuple[str, ...], tuple[str, ...]]] = {}

    def update(self, attempt: Attempt) -> None:
        key = (attempt.project, attempt.job_id, attempt.attempt)
        old_nodes, old_filesystems = self._placed.pop(key, ((), ()))
        for node in old_nodes:
            self._nodes[node].pop(key, None)
        for filesystem in old_filesystems:
            self._filesystems[filesystem].pop(key, None)
        if attempt.started_at is None:
            return
        span = Span(attempt.project, attempt.job_id, attempt.attempt, attempt.started_at,
                    attempt.ended_at)
        filesystems = tuple(sorted({filesystem_of(m) for m in attempt.mounts}))
        for node in attempt.nodes:
            self._nodes[node][key] = span
        for filesystem in filesystems:
            self._filesystems[filesystem][key] = span
        self._placed[key] = (attempt.nodes, filesystems)

    @staticmethod
    def _covering(spans: dict[tuple[str, str, int], Span] | None, time: datetime,
                  slack: timedelta) -> list[Span]:
        if not spans:
            return []
        return [spans[k] for k in sorted(spans) if spans[k].covers(time, slack)]

    def on_node(self, node: str, time: datetime) -> list[Span]:
        return self._covering(self._nodes.get(node), time, self.slack)

    def on_filesystem(self, filesystem: str, time: datetime) -> list[Span]:
        return self._covering(self._filesystems.get(filesystem), time, self.slack)


_NODE_SCOPES = {Scope.node, Scope.gpu, Scope.nic, Scope.rank, Scope.port}
_STORAGE_SCOPES = {Scope.filesystem, Scope.target, Scope.path}


def _event_filesystem(event: Event) -> str:
    named = event.attributes.get("filesystem")
    if isinstance(named, str) and named:
        return named
    if event.scope == Scope.filesystem and event.entity:
        return event.entity
    return ""


def rows_for(event: Event, membership: Membership, attempt_of_job: int | None) -> list[TimelineRow]:
    """Timeline rows for one event; `attempt_of_job` resolves job events without an attempt."""
    if event.job_id:
        # no attempt from the producer: the attempt running then, else the first one
        attempt = event.attempt if event.attempt is not None else (attempt_of_job or 1)
        entity = event.entity or event.node or ""
        return [TimelineRow(event.project, event.job_id, attempt, event, "self", entity, "")]
    rows: list[TimelineRow] = []
    seen: set[tuple[str, str, int]] = set()
    node = event.node or (event.entity if event.scope == Scope.node else None)
    if node and (event.scope in _NODE_SCOPES or event.scope is None):
        relation = "node" if event.scope in (None, Scope.node) else event.scope.value
        entity = event.entity or node
        path = f"{entity} → {node}" if entity != node else node
        for span in membership.on_node(node, event.time):
            seen.add((span.project, span.job_id, span.attempt))
            rows.append(TimelineRow(span.project, span.job_id, span.attempt, event, relation,
                                    entity, path))
    filesystem = _event_filesystem(event)
    if filesystem and (event.scope in _STORAGE_SCOPES or event.scope is None):
        relation = "target" if event.scope == Scope.target else "filesystem"
        entity = event.entity or filesystem
        path = f"{entity} → {filesystem}" if entity != filesystem else filesystem
        for span in membership.on_filesystem(filesystem, event.time):
            key = (span.project, span.job_id, span.attempt)
            if key not in seen:
                rows.append(TimelineRow(span.project, span.job_id, span.attempt, event,
                                        relation, entity, path))
    return rows
