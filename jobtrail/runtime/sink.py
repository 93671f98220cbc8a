"""The write path both runtimes share: decode a batch, drop stored ids, process, write.

A batch is acknowledged (Kafka offsets committed, embedded log offset advanced) only after
`handle` returns, i.e. after ClickHouse acknowledged every insert. Redelivered records are
dropped here, before the processors see them, by asking the store which ids it already has.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from ingest.canonical import decode_canonical
from jobtrail.store import Store
from jobtrail.telemetry import emit
from processors.incidents.model import Command, IncidentEvent
from processors.pipeline import Pipeline
from schemas.dead_letters import DeadLetter
from schemas.events import Event

log = logging.getLogger("jobtrail.incidents")


@dataclass
class BatchResult:
    received: int = 0
    stored: int = 0
    duplicates: int = 0
    timeline_rows: int = 0
    dead_letters: list[DeadLetter] = field(default_factory=list)


class Sink:
    def __init__(self, store: Store, pipeline: Pipeline) -> None:
        self.store = store
        self.pipeline = pipeline

    def restore(self) -> int:
        attempts = self.store.load_attempts()
        recent = self.store.recent_infra_events(self.pipeline.lateness.total_seconds())
        self.pipeline.restore(attempts, recent)
        rules = self.pipeline.detector.rules
        memory = 2 * max(rules.cause_window_s, rules.group_window_s, rules.restart_deadline_s,
                         rules.progress.hang_after_s, rules.progress.fail_slow.for_s)
        self.pipeline.restore_incidents(self.store.load_incident_log(),
                                        self.store.recent_events(memory))
        return len(attempts)

    def command(self, command: Command,
                publish: Callable[[list[IncidentEvent]], None] | None = None,
                ) -> list[IncidentEvent]:
        """Apply a person's command (raises InvalidTransition) and store what it changed."""
        outputs = self.pipeline.command(command)
        if publish is not None and outputs.incidents:
            publish(outputs.incidents)
        self.store.write(outputs)
        emit("incident_commands", 1, command=command.command)
        return outputs.incidents

    def decode(self, records: Sequence[bytes | str], positions: Sequence[str] | None = None,
               ) -> tuple[list[Event], list[DeadLetter]]:
        events: list[Event] = []
        dead: list[DeadLetter] = []
        for i, raw in enumerate(records):
            out = decode_canonical(raw, position=positions[i] if positions else f"record {i}")
            (events if isinstance(out, Event) else dead).append(out)  # type: ignore[arg-type]
        return events, dead

    def handle(self, events: Sequence[Event], dead_letters: Sequence[DeadLetter] = (),
               token: str | None = None,
               publish: Callable[[list[IncidentEvent]], None] | None = None) -> BatchResult:
        """Process and store one batch; raises StoreUnavailable if ClickHouse stays down.

        `publish` (the cluster runtime's producer to `jobtrail.incident-events`) runs after
        processing and before the write: a crash in between replays the batch, which
        regenerates the same incident events (same ids), so the topic is at-least-once and
        never misses one."""
        result = BatchResult(received=len(events) + len(dead_letters),
                             dead_letters=list(dead_letters))
        unique: dict[str, Event] = {}
        for event in events:
            unique.setdefault(event.id, event)
        stored = self.store.stored_ids(list(unique.values()))
        fresh = [e for e in unique.values() if e.id not in stored]
        result.duplicates = len(events) - len(fresh)
        known_letters = self.store.stored_dead_letter_ids([d.id for d in dead_letters])
        dead_letters = [d for d in dead_letters if d.id not in known_letters]
        outputs = self.pipeline.process(fresh)
        if publish is not None and outputs.incidents:
            publish(outputs.incidents)
        self.store.write(outputs, dead_letters, token)
        _incident_latency(outputs.incidents, self.pipeline.detector.opened_observed)
        result.stored = len(fresh)
        result.timeline_rows = len(outputs.timeline)
        emit("events_stored", len(fresh))
        emit("events_duplicate", result.duplicates)
        for letter in dead_letters:
            emit("events_dead_lettered", 1, stage=letter.stage)
        return result


def _incident_latency(events: Sequence[IncidentEvent], observed: dict[str, datetime]) -> None:
    """Signal observed -> incident stored, for every incident this batch opened."""
    now = datetime.now(UTC)
    for event in events:
        emit("incident_events", 1, kind=event.kind)
        if event.kind != "opened":
            continue
        emit("incidents_opened", 1)
        seen = observed.pop(event.incident_id, None)
        if seen is not None:
            ms = int((now - seen).total_seconds() * 1000)
            emit("incident_open_latency_ms", max(ms, 1))
            log.info("incident_opened id=%s class=%s latency_ms=%d", event.incident_id,
                     event.data.get("class"), ms)
