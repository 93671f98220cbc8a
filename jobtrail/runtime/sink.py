"""The write path both runtimes share: decode a batch, sort out what is new, process, write.

A batch is acknowledged (Kafka offsets, the embedded log's committed offset) only after
`handle` returns, i.e. after ClickHouse acknowledged every insert.

What is new is decided per event id against `event_ids`, in arrival order, first wins:
- not stored: processed and written;
- stored by this same arrival (the same record read again after a crash between the write
  and the acknowledgement): processed again, so the processors' state holds it, and its
  derived rows written again (idempotent); the event itself is not stored twice;
- stored by another arrival with the same content: a duplicate, dropped and counted;
- stored with other content: a conflicting re-send, dead-lettered naming the fields that
  differ (`process.dedup`); the stored event stands.

`write=False` runs the processors only: a runtime replaying records it already wrote, to
bring a loaded snapshot up to its committed offset.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from ingest.canonical import decode_canonical, decode_trusted
from ingest.redact import redact_text
from jobtrail.store import Store
from jobtrail.telemetry import emit
from processors.incidents.model import Command, IncidentEvent
from processors.pipeline import Outputs, Pipeline
from schemas.dead_letters import DeadLetter
from schemas.events import Event, Scope

_RENAMED = frozenset({Scope.target, Scope.nic})
"""Scopes whose entity the topology may name otherwise than the source spelt it."""

log = logging.getLogger("jobtrail.incidents")


Publish = Callable[[list[IncidentEvent]], Callable[[], None] | None]
"""Sends a batch's incident events to the broker (the cluster runtime's producer to
`jobtrail.incident-events`) and returns a wait for the broker's acknowledgement (None when
it has waited already). The sink waits after writing the store: the broker's round trip runs
while the store inserts. A crash before both finished replays the batch (nothing is acked),
which regenerates the same incident events (same ids)."""


@dataclass
class Decoded:
    events: list[Event] = field(default_factory=list)
    dead: list[DeadLetter] = field(default_factory=list)
    origin: list[int] = field(default_factory=list)
    """For each event, the index of the record it came from (to keep its arrival)."""
    raw: dict[str, bytes] = field(default_factory=dict)
    """By id, the canonical JSON a fast-path event arrived as (stored without re-encoding)."""


@dataclass
class BatchResult:
    received: int = 0
    stored: int = 0
    duplicates: int = 0
    timeline_rows: int = 0
    dead_letters: list[DeadLetter] = field(default_factory=list)

    def add(self, other: BatchResult) -> None:
        self.received += other.received
        self.stored += other.stored
        self.duplicates += other.duplicates
        self.timeline_rows += other.timeline_rows
        self.dead_letters.extend(other.dead_letters)


def redact_command(command: Command) -> Command:
    """The command with every string redacted (InvalidTransition for data we refuse)."""
    from ingest.canonical import ParseError, clean
    from processors.incidents.model import InvalidTransition

    try:
        data = clean(command.data, "data")
    except ParseError as exc:
        raise InvalidTransition(f"{exc.field}: {exc.reason}") from None
    actor = command.actor.model_copy(update={"name": redact_text(command.actor.name)})
    command_id = command.command_id
    if redact_text(command_id) != command_id:
        command_id = "redacted-" + hashlib.sha256(command_id.encode()).hexdigest()[:32]
    return command.model_copy(update={"data": data, "actor": actor, "command_id": command_id})


def conflict_letter(event: Event, first: Event, arrival: str, received_at: datetime,
                    ) -> DeadLetter:
    differ = event.differences(first)
    payload = event.to_json()  # already validated and redacted
    ref = arrival or event.id
    return DeadLetter(
        id=DeadLetter.make_id("process.dedup", payload, ref), stage="process.dedup",
        reason=f"conflicting re-send: id {event.id[:64]} was first stored with other content "
               f"({', '.join(differ) or 'attributes'} differ); the first wins",
        field=differ[0] if differ else "", producer=event.producer, event_ref=ref,
        payload=payload, received_at=received_at)


class Sink:
    def __init__(self, store: Store, pipeline: Pipeline, *, evicts: bool = True) -> None:
        self.store = store
        self.pipeline = pipeline
        self.evicts = evicts
        """Whether incidents leave memory (`pipeline.eviction`) to be read back from the
        store's `incident_log`."""
        self.clusters: dict[str, Pipeline] = {}
        """Cluster -> the pipeline that follows it. Entity names are unique only within a
        cluster (two clusters can both have a `node-001`), so every cluster this sink sees
        (a partition's, the embedded home's) has a state of its own: `pipeline` goes to the
        first cluster seen, a sibling configured like it to each other one."""

    def pipeline_of(self, cluster: str) -> Pipeline:
        found = self.clusters.get(cluster)
        if found is None:
            found = self.pipeline if not self.clusters else _sibling(self.pipeline)
            self.clusters[cluster] = found
            self._archive(cluster, found)
        return found

    def _archive(self, cluster: str, pipeline: Pipeline) -> None:
        from jobtrail.runtime.archive import StoreArchive

        pipeline.archive(StoreArchive(self.store, cluster) if self.evicts else None)

    def bind_archives(self) -> None:
        """After a snapshot is adopted: each cluster's pipeline reads its evicted incidents
        back from the store (the binding is never saved)."""
        for cluster, pipeline in self.clusters.items():
            self._archive(cluster, pipeline)

    def pipelines(self) -> list[Pipeline]:
        """Every pipeline this sink holds, `pipeline` first."""
        distinct = {id(p): p for p in [self.pipeline, *self.clusters.values()]}
        return list(distinct.values())

    def restore(self) -> str:
        """Rebuild processor state from the store when no snapshot can be used.

        Approximate by nature (docs/operations.md): attempts and incidents are exact, the
        detector's memory is rebuilt from recent events. Never refuses to start: what could
        not be replayed is counted and reported."""
        attempts = self.store.load_attempts()
        recent = self.store.recent_infra_events(self.pipeline.lateness.total_seconds())
        memory = self.pipeline.detector.rules.memory_s
        log_events = self.store.load_incident_log()
        remembered = self.store.recent_events(memory)
        clusters = sorted({a.cluster for a in attempts} | {e.cluster for e in recent}
                          | {e.cluster for e in remembered})
        owner = self.store.incident_clusters() if len(clusters) > 1 else {}
        failed: list[str] = []
        for cluster in clusters or [""]:
            pipeline = self.pipeline_of(cluster) if clusters else self.pipeline
            pipeline.restore([a for a in attempts if a.cluster == cluster],
                             [e for e in recent if e.cluster == cluster])
            failed += pipeline.restore_incidents(
                [e for e in log_events if owner.get(e.incident_id, clusters[0] if clusters
                                                    else "") == cluster],
                [e for e in remembered if e.cluster == cluster])
        report = (f"rebuilt from the store: {len(attempts)} attempts, {len(log_events)} "
                  f"incident events, detector memory from the last {memory / 3600:.1f} h")
        if len(clusters) > 1:
            report += f", {len(clusters)} clusters"
        if failed:
            report += f"; {len(failed)} events could not be replayed ({failed[0]})"
        return report

    def command(self, command: Command,
                publish: Publish | None = None,
                write: bool = True) -> list[IncidentEvent]:
        """Apply a person's command (raises InvalidTransition) and store what it changed.
        Its text (note, action title, who) is redacted first, whatever path it came by."""
        owner = self._owner(command.incident_id)
        outputs = owner.command(redact_command(command))
        if write:
            sent = publish(outputs.incidents) if publish is not None and outputs.incidents \
                else None
            self.store.write(outputs)
            if sent is not None:
                sent()
            emit("incident_commands", 1, command=command.command)
        return outputs.incidents

    def _owner(self, incident_id: str) -> Pipeline:
        """The pipeline whose book holds (or held, before evicting it) the incident."""
        pipelines = self.pipelines()
        held = next((p for p in pipelines if incident_id in p.detector.incidents.resident()),
                    None)
        if held is not None or len(self.clusters) <= 1:
            return held or self.pipeline
        cluster = self.store.incident_cluster(incident_id)
        return self.clusters.get(cluster, self.pipeline) if cluster is not None \
            else self.pipeline

    def decode(self, records: Sequence[bytes | str], positions: Sequence[str] | None = None,
               *, trusted: bool | Sequence[bool] = False) -> Decoded:
        """Canonical records -> events and dead letters. `trusted` (all records, or one flag
        each): the embedded log, written by this process's ingest, and messages signed with
        the wire key; those take the fast path and are stored as they came."""
        out = Decoded()
        seen: set[str] = set()
        for i, raw in enumerate(records):
            fast = trusted if isinstance(trusted, bool) else trusted[i]
            event = decode_trusted(raw) if fast else None
            result: Event | DeadLetter
            if event is not None:
                # the first record of an id wins (a later one is a duplicate or a conflict),
                # whichever path decoded it: its bytes are the event the batch processes
                if event.id not in seen:
                    out.raw[event.id] = raw if isinstance(raw, bytes) else raw.encode()
                result = event
            else:
                result = decode_canonical(
                    raw, position=positions[i] if positions else f"record {i}")
            if isinstance(result, Event):
                seen.add(result.id)
                out.events.append(result)
                out.origin.append(i)
            else:
                out.dead.append(result)
        return out

    def handle(self, events: Sequence[Event], dead_letters: Sequence[DeadLetter] = (),
               token: str | None = None,
               publish: Publish | None = None, *,
               arrivals: Sequence[str] | None = None, write: bool = True,
               raw: dict[str, bytes] | None = None) -> BatchResult:
        """Process and store one batch; raises StoreUnavailable if ClickHouse stays down.

        `arrivals[i]` says where `events[i]` was read (stream and offset); without it every
        stored id counts as a duplicate. `publish` (the cluster runtime's producer to
        `jobtrail.incident-events`) runs after processing and before the write: a crash in
        between replays the batch, which regenerates the same incident events (same ids)."""
        result = BatchResult(received=len(events) + len(dead_letters))
        events, raw = self._gpu_named(events, raw)
        now = datetime.now(UTC)
        where = list(arrivals) if arrivals is not None else [""] * len(events)
        first: dict[str, tuple[Event, str]] = {}
        conflicts: list[DeadLetter] = []
        for event, arrival in zip(events, where, strict=True):
            seen = first.get(event.id)
            if seen is None:
                first[event.id] = (event, arrival)
            elif seen[0].digest() != event.digest():
                conflicts.append(conflict_letter(event, seen[0], arrival, now))
            else:
                result.duplicates += 1
        stored = self.store.arrivals(list(first))
        fresh: list[Event] = []
        replayed: set[str] = set()
        clash: list[tuple[Event, str]] = []
        for event_id, (event, arrival) in first.items():
            known = stored.get(event_id)
            if known is None:
                fresh.append(event)
            elif arrival and known[0] == arrival:
                fresh.append(event)
                replayed.add(event_id)
            elif known[1] and known[1] != event.digest():
                clash.append((event, arrival))
            else:
                result.duplicates += 1
        if clash:
            originals = self.store.events_by_id([e.id for e, _ in clash])
            for event, arrival in clash:
                original = originals.get(event.id)
                if original is None:  # indexed but not readable: treat as the same event
                    result.duplicates += 1
                    continue
                conflicts.append(conflict_letter(event, original, arrival, now))
        letters = [*dead_letters, *conflicts]
        result.dead_letters = letters
        outputs = self._process(fresh, raw)
        result.stored = len(fresh) - len(replayed)
        result.timeline_rows = len(outputs.timeline)
        if not write:
            return result
        known_letters = self.store.stored_dead_letter_ids([d.id for d in letters])
        new_letters = [d for d in letters if d.id not in known_letters]
        sent = publish(outputs.incidents) if publish is not None and outputs.incidents \
            else None
        self.store.write(outputs, new_letters, token, known=replayed,
                         arrivals={e.id: a for e, a in first.values() if a}, raw=raw)
        if sent is not None:
            sent()  # the broker acknowledged too: only now may the caller ack the batch
        _incident_latency(outputs.incidents,
                          [p.detector.opened_observed for p in self.pipelines()])
        emit("events_stored", result.stored)
        emit("events_duplicate", result.duplicates)
        for letter in new_letters:
            emit("events_dead_lettered", 1, stage=letter.stage)
        return result

    def _gpu_named(self, events: Sequence[Event], raw: dict[str, bytes] | None,
                   ) -> tuple[list[Event], dict[str, bytes] | None]:
        """GPU events that give only a PCI address (a kernel Xid), named by the topology's
        GPU table before they are compared and stored (and storage targets and NIC ports,
        `Pipeline.entity_named`), so `jobtrail entity node-041/gpu3`
        finds them and a re-send is named the same way (the address and the line stay in
        their attributes). A renamed event's received JSON is not what is stored."""
        out: list[Event] = []
        kept = dict(raw) if raw is not None else None
        for event in events:
            named = self.pipeline_of(event.cluster).entity_named(event) \
                if event.attributes.get("pci") or event.scope in _RENAMED else event
            if named is not event and kept is not None:
                kept.pop(event.id, None)
            out.append(named)
        return out, kept

    def _process(self, events: Sequence[Event],
                 raw: dict[str, bytes] | None = None) -> Outputs:
        """Each cluster's events through its own pipeline, in arrival order within it."""
        groups: dict[str, list[Event]] = {}
        for event in events:
            groups.setdefault(event.cluster, []).append(event)
        if len(groups) <= 1:
            cluster = next(iter(groups), None)
            return (self.pipeline if cluster is None else self.pipeline_of(cluster)
                    ).process(events, raw)
        merged = Outputs()
        for cluster, group in groups.items():
            out = self.pipeline_of(cluster).process(group, raw)
            merged.events += out.events
            merged.timeline += out.timeline
            merged.attempts += out.attempts
            merged.incidents += out.incidents
            merged.incident_states += out.incident_states
        return merged


def _sibling(template: Pipeline) -> Pipeline:
    """An empty pipeline configured like `template` (rules, wiring, windows)."""
    sibling = Pipeline(template.membership.slack, template.topology, template.lateness,
                       template.detector.rules, template.eviction)
    sibling.job_retention = template.job_retention
    return sibling


def _incident_latency(events: Sequence[IncidentEvent],
                      observed: Sequence[dict[str, datetime]]) -> None:
    """Signal observed -> incident stored, for every incident this batch opened."""
    now = datetime.now(UTC)
    for event in events:
        emit("incident_events", 1, kind=event.kind)
        if event.kind != "opened":
            continue
        emit("incidents_opened", 1)
        seen = next((o.pop(event.incident_id) for o in observed if event.incident_id in o),
                    None)
        if seen is not None:
            ms = int((now - seen).total_seconds() * 1000)
            emit("incident_open_latency_ms", max(ms, 1))
            log.info("incident_opened id=%s class=%s latency_ms=%d", event.incident_id,
                     event.data.get("class"), ms)
