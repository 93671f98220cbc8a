"""The processing both runtimes share: a batch of canonical events in, table rows out.

`Pipeline` holds the small state (job records, membership index, wiring, and a window of
recent infrastructure events) and calls the pure folds in `attempts`, `timeline` and
`topology`. Within a batch, lifecycle and topology events are folded first.

Out-of-order arrival: an infrastructure event is attributed on arrival to every attempt whose
span covers it; it also waits, indexed by entity, for `lateness` (event time, measured
against the highest event time seen, the watermark). An attempt that starts (or whose
membership changes) within that window picks up the waiting events that fall in its span.
An event later than the window behind the watermark is stored and queryable by entity but not
re-attributed. State is rebuilt from the store on start (`restore`).

The detector sees the same horizon: an event that arrives behind one it already decided on
re-evaluates the window in event-time order (`processors/incidents/lateness.py`), and the
incident log is revised rather than a second incident opened.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from processors import gpus
from processors.attempts import LIFECYCLE_TYPES, Attempt, JobRecord, evolve
from processors.incidents.archive import Archive
from processors.incidents.detector import Detector
from processors.incidents.eviction import Eviction, evict, prune
from processors.incidents.lateness import Lateness
from processors.incidents.model import Command, Incident, IncidentEvent
from processors.incidents.rules import Rules, load_rules
from processors.timeline import (
    Membership,
    TimelineRow,
    change_nodes,
    change_rows,
    filesystem_of,
    lookup_keys,
    rows_for,
)
from processors.topology import Topology, entity_named
from schemas.events import Event

JOB_RETENTION = timedelta(hours=24)
MAX_WAITING = 100_000
"""Infrastructure events held for late attribution at most (the oldest leave first): a
file import's week of horizon would otherwise hold every event of a large log; a fleet's
ten minutes hold about a tenth of this."""
"""How long (event time) a job whose attempts all ended stays in the state: a requeue, a late
lifecycle event or a recovery after that long starts from a fresh record (the stored attempt,
with its higher version, stands). Beyond every detection window (the longest, 30 min)."""
SWEEP_EVERY = timedelta(minutes=10)
CHANGE_MEMORY = timedelta(days=7)
"""How long (event time) a change stays on its nodes for attempts that start after it (the
newest of each kind per node: a rollback replaces the rollout)."""
MAX_CHANGES = 100_000
"""(node, kind) changes remembered at most (the oldest leave first)."""


@dataclass
class Outputs:
    events: list[Event] = field(default_factory=list)
    timeline: list[TimelineRow] = field(default_factory=list)
    attempts: list[Attempt] = field(default_factory=list)
    incidents: list[IncidentEvent] = field(default_factory=list)
    incident_states: list[Incident] = field(default_factory=list)


class Pipeline:
    fast = False
    """True: inert events (`processors.incidents.inert`) only move the detector's time on,
    deciding exactly what observing them decides (`tests/processors/test_fast_path.py`).
    Off by default: it did not pay (`bench.fastpath`, docs/scaling.md: observing an inert
    event cost a few µs, about what telling it inert costs)."""

    def __init__(self, slack: timedelta = timedelta(seconds=30),
                 topology: Topology | None = None,
                 lateness: timedelta = timedelta(minutes=10), rules: Rules | None = None,
                 eviction: Eviction | None = None) -> None:
        self.jobs: dict[tuple[str, str], JobRecord] = {}
        self.detector = Detector(rules or load_rules(), lambda: self.topology)
        self.membership = Membership(slack)
        self.topology = topology or Topology()
        self.lateness = lateness
        self.reorder = Lateness(horizon=lateness)
        self.watermark: datetime | None = None
        self._waiting: dict[str, dict[str, Event]] = defaultdict(dict)
        self._waiting_order: deque[tuple[datetime, str, str]] = deque()
        self._attributed: dict[str, set[tuple[str, str, int]]] = {}
        self._changes: dict[str, dict[str, Event]] = {}
        """node -> kind -> the latest change applied to it (`change_rows`)."""
        self._change_done: dict[str, set[tuple[str, str, int]]] = {}
        self.job_retention = max(JOB_RETENTION, lateness)
        self._swept: datetime | None = None
        self.eviction = eviction or Eviction()
        """When incidents leave memory; only once an archive is bound (`archive`)."""

    def archive(self, archive: Archive | None, eviction: Eviction | None = None) -> None:
        """Where evicted incidents are folded back from (None: nothing is evicted). Bound
        by the runtime at start and after loading a snapshot: it is never saved."""
        self.detector.book.incidents.bound(archive)
        if eviction is not None:
            self.eviction = eviction

    def bind(self, rules: Rules, topology: Topology | None = None,
             lateness: timedelta | None = None) -> None:
        """After loading a snapshot: this run's rules, a new topology when the file it
        was built from changed, and this run's lateness horizon (an import or a backfill
        runs with a generous one)."""
        if topology is not None:
            self.topology = topology
        if lateness is not None:
            self.lateness = self.reorder.horizon = lateness
            self.job_retention = max(JOB_RETENTION, lateness)
        self.detector.bind(rules, lambda: self.topology)

    def restore(self, attempts: Iterable[Attempt], recent: Iterable[Event] = ()) -> None:
        """Rebuild state from stored attempts and the recent infrastructure events."""
        for attempt in attempts:
            key = (attempt.project, attempt.job_id)
            job = self.jobs.get(key) or JobRecord(attempt.project, attempt.job_id)
            self.jobs[key] = JobRecord(job.project, job.job_id,
                                       {**job.attempts, attempt.attempt: attempt})
            self.membership.update(attempt)
        for event in sorted(recent, key=lambda e: (e.time, e.id)):
            if event.type == "topology.link":
                self.topology.apply(event)
            elif not event.job_id:
                self._wait(event, set())
                self._stand(event)
            self._advance(event.time)

    def _advance(self, time: datetime) -> None:
        if self.watermark is None or time > self.watermark:
            self.watermark = time

    def _wait(self, event: Event, attributed: set[tuple[str, str, int]]) -> None:
        keys = lookup_keys(event, self.topology)
        for key in keys:
            self._waiting[key][event.id] = event
            self._waiting_order.append((event.time, key, event.id))
        if keys:  # an event no attempt can be found by never leaves the order: not kept
            self._attributed[event.id] = attributed

    def _stand(self, event: Event) -> None:
        """A change stays on its nodes for the attempts that start after it."""
        if not event.type.startswith("change.") or event.job_id:
            return
        kind = str(event.attributes.get("kind") or event.type)
        for node in change_nodes(event):
            kinds = self._changes.setdefault(node, {})
            old = kinds.get(kind)
            if old is None or (old.time, old.id) < (event.time, event.id):
                kinds[kind] = event

    def _forget_changes(self) -> None:
        if self.watermark is None or not self._changes:
            return
        cutoff = self.watermark - CHANGE_MEMORY
        held = sorted((e.time, node, kind) for node, kinds in self._changes.items()
                      for kind, e in kinds.items())
        gone = [h for h in held if h[0] < cutoff]
        gone += held[len(gone):][:max(0, len(held) - len(gone) - MAX_CHANGES)]
        for _, node, kind in gone:
            kinds = self._changes[node]
            kinds.pop(kind, None)
            if not kinds:
                del self._changes[node]
        live = {e.id for kinds in self._changes.values() for e in kinds.values()}
        for event_id in [i for i in self._change_done if i not in live]:
            del self._change_done[event_id]

    def _change_rows(self, attempt: Attempt) -> list[TimelineRow]:
        """Changes applied to the attempt's nodes before it started: its timeline shows them
        (relation `change`), and the detector weighs them as candidate causes."""
        target = (attempt.project, attempt.job_id, attempt.attempt)
        found = {e.id: e for n in attempt.nodes for e in self._changes.get(n, {}).values()}
        rows = []
        for event_id in sorted(found):
            done = self._change_done.setdefault(event_id, set())
            if target in done or target in self._attributed.get(event_id, ()):
                continue
            for row in change_rows(found[event_id], attempt):
                rows.append(row)
                done.add(target)
        return rows

    def _expire(self) -> None:
        if self.watermark is None:
            return
        cutoff = self.watermark - self.lateness
        order = self._waiting_order
        while order and (order[0][0] < cutoff or len(self._attributed) > MAX_WAITING):
            leaving = order[0][2]
            while order and order[0][2] == leaving:  # an event's entries are appended together
                _, key, event_id = order.popleft()
                bucket = self._waiting.get(key)
                if bucket is not None:
                    bucket.pop(event_id, None)
                    if not bucket:
                        del self._waiting[key]
            self._attributed.pop(leaving, None)
        self.membership.prune(cutoff)
        self._settle()
        if self._swept is None or self.watermark - self._swept >= SWEEP_EVERY:
            self._swept = self.watermark
            self._forget_jobs(self.watermark - self.job_retention)
            self._forget_changes()

    def _settle(self) -> None:
        """Incidents past their eviction setting leave memory (with an archive bound), and
        the detector's indexes drop what is past every window (always)."""
        book = self.detector.book
        if book.watermark is None:
            return
        if book.incidents.recall is not None:
            evict(book, self.eviction, self.reorder.busy())
        rules = self.detector.rules
        prune(book, book.watermark - self.lateness - timedelta(seconds=rules.memory_s),
              timedelta(seconds=rules.repeat_offender_window_s))

    def _forget_jobs(self, cutoff: datetime) -> None:
        """Jobs whose every attempt ended before `cutoff` leave the state (here and in the
        detector): a worker's memory follows the jobs running, not every job it ever saw.
        Event time decides, so a replay forgets exactly what the first run forgot."""
        for key in [k for k, job in self.jobs.items() if job.ended_before(cutoff)]:
            del self.jobs[key]
        self.detector.forget_jobs(cutoff)

    def _keys_of(self, attempt: Attempt) -> set[str]:
        at = attempt.started_at
        keys = {f"node:{n}" for n in attempt.nodes}
        keys |= {f"fs:{filesystem_of(m)}" for m in attempt.mounts}
        if attempt.queue:
            keys.add(f"queue:{attempt.queue}")
        if at is not None:
            for node in attempt.nodes:
                keys |= {f"switch:{s}" for s in self.topology.switches_of(node, at)}
        return keys

    def _late_rows(self, attempt: Attempt) -> list[TimelineRow]:
        """Waiting events that the (re)placed attempt now covers."""
        target = (attempt.project, attempt.job_id, attempt.attempt)
        candidates: dict[str, Event] = {}
        for key in self._keys_of(attempt):
            candidates.update(self._waiting.get(key, {}))
        rows = []
        for event_id in sorted(candidates):
            event = candidates[event_id]
            done = self._attributed.setdefault(event_id, set())
            if target in done:
                continue
            for row in rows_for(event, self.membership, None, self.topology):
                if (row.project, row.job_id, row.attempt) == target:
                    rows.append(row)
                    done.add(target)
        return rows

    def gpu_named(self, event: Event) -> Event:
        """A GPU event that gives only a PCI address (a kernel Xid), with the GPU index from
        the topology's GPU table, for the timeline, the detector and the stored event (the
        sink names it before storing; the address and the line stay in its attributes)."""
        pci = event.attributes.get("pci")
        if not isinstance(pci, str) or event.attributes.get("gpu") not in (None, "") \
                or not event.node:
            return event
        index = self.topology.gpu_of(event.node, pci)
        if index is None:
            return event
        return event.model_copy(update={"entity": f"{event.node}/gpu{index}",
                                        "attributes": {**event.attributes, "gpu": str(index)}})

    def entity_named(self, event: Event) -> Event:
        """The event's entity as the topology names it (`topology.entity_named`): a GPU
        from its PCI address (`gpu_named`), a Lustre target, an HCA port."""
        return entity_named(self.topology, self.gpu_named(event))

    def named(self, event: Event) -> Event:
        """The event as the folds see it: its entity as the topology names it
        (`entity_named`), a start on a whole-node partition with the topology's GPU count
        (`gpus.whole_nodes`)."""
        event = self.entity_named(event)
        if event.type != "job.started":
            return event
        job = self.jobs.get((event.project, event.job_id or ""))
        queue = next((a.queue for a in job.attempts.values() if a.queue), "") if job else ""
        return gpus.whole_nodes(event, self.topology, queue)

    def process(self, events: Sequence[Event],
                raw: Mapping[str, bytes] | None = None) -> Outputs:
        """Fold a batch; events must already be new (the sink filters stored ids). `raw`:
        by id, the JSON an event was decoded from, if the caller has it (the detector's
        journal keeps it rather than encoding the event again)."""
        out = Outputs(events=list(events))
        given = raw or {}
        named = [self.named(e) for e in events]
        json_of = {e.id: given[e.id] for e, n in zip(events, named, strict=True)
                   if n is e and e.id in given}
        events = named
        changed: dict[tuple[str, str], set[int]] = {}
        for event in sorted((e for e in events if e.type == "topology.link"),
                            key=lambda e: (e.time, e.id)):
            self.topology.apply(event)
        for event in events:
            self._advance(event.time)
            if event.type in LIFECYCLE_TYPES and event.job_id:
                key = (event.project, event.job_id)
                job, touched = evolve(self.jobs.get(key), event)
                if job is not None and touched:
                    self.jobs[key] = job
                    changed.setdefault(key, set()).update(touched)
        placed: list[Attempt] = []
        for key, numbers in changed.items():
            for number in sorted(numbers):
                attempt = self.jobs[key].attempts[number]
                self.membership.update(attempt)
                out.attempts.append(attempt)
                placed.append(attempt)
        for event in events:
            if event.type.startswith("change.") and not event.job_id:
                self._stand(event)
        late = [row for attempt in placed if attempt.started_at is not None
                for row in [*self._late_rows(attempt), *self._change_rows(attempt)]]
        out.timeline.extend(late)
        self.detector.reach(late)  # once per batch: it indexes every remembered signal
        for event in events:
            if event.type == "topology.link":
                continue
            rows = self._rows(event)
            out.timeline.extend(rows)
            if not event.job_id:
                self._wait(event, {(r.project, r.job_id, r.attempt) for r in rows})
                if event.type.startswith("change."):
                    self._change_done.setdefault(event.id, set()).update(
                        (r.project, r.job_id, r.attempt) for r in rows)
            out.incidents.extend(self.reorder.observe(self.detector, event,
                                                      self._rows_but(event, rows),
                                                      json_of.get(event.id), self.fast))
        incident_ids = dict.fromkeys(e.incident_id for e in out.incidents)
        out.incident_states = [self.detector.incidents[i] for i in incident_ids]
        self._expire()
        return out

    def _rows_but(self, event: Event, rows: list[TimelineRow]
                  ) -> Callable[[Event], Sequence[TimelineRow]]:
        """Attribution for the detector: `rows` for `event`, as known now for the others
        (a re-evaluation replays events whose attempts became known since)."""
        def rows_of(other: Event) -> Sequence[TimelineRow]:
            return rows if other.id == event.id else self._rows(other)
        return rows_of

    def _rows(self, event: Event) -> list[TimelineRow]:
        # only a job event without its attempt needs the attempt running then
        job_record = self.jobs.get((event.project, event.job_id)) \
            if event.job_id and event.attempt is None else None
        attempt_of_job = job_record.attempt_at(event.time) if job_record else None
        return rows_for(event, self.membership, attempt_of_job, self.topology)

    def restore_incidents(self, log: Sequence[IncidentEvent],
                          recent: Iterable[Event]) -> list[str]:
        """The incident book from its log; the detector's memory (signals, progress) from
        the recent events, replayed without deciding anything again. Returns what could not
        be replayed (one line each): a restore reports and carries on, it never refuses."""
        self.detector.restore(log, self.jobs)
        self.detector.replaying = True
        failed: list[str] = []
        try:
            for event in sorted(recent, key=lambda e: (e.time, e.id)):
                if event.type == "topology.link":
                    continue
                try:
                    named = self.named(event)
                    self.detector.observe(named, self._rows(named))
                except Exception as exc:  # stored history must never stop a start
                    failed.append(f"{event.type} {event.id}: {type(exc).__name__}: {exc}")
        finally:
            self.detector.replaying = False
            self.detector.book.incidents.recalled.clear()
        return failed

    def command(self, command: Command) -> Outputs:
        """A person's incident command, through the same book the detector decides with."""
        events = self.detector.command(command)
        self.reorder.recalled_outside(self.detector.book)
        return Outputs(incidents=events,
                       incident_states=[self.detector.incidents[command.incident_id]] if events
                       else [])
