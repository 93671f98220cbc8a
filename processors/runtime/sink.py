"""The write path both runtimes share: decode a batch, drop stored ids, process, write.

A batch is acknowledged (Kafka offsets committed, embedded log offset advanced) only after
`handle` returns, i.e. after ClickHouse acknowledged every insert. Redelivered records are
dropped here, before the processors see them, by asking the store which ids it already has.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ingest.canonical import decode_canonical
from jobtrail.store import Store
from jobtrail.telemetry import emit
from processors.pipeline import Pipeline
from schemas.dead_letters import DeadLetter
from schemas.events import Event


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
        return len(attempts)

    def decode(self, records: Sequence[bytes | str], positions: Sequence[str] | None = None,
               ) -> tuple[list[Event], list[DeadLetter]]:
        events: list[Event] = []
        dead: list[DeadLetter] = []
        for i, raw in enumerate(records):
            out = decode_canonical(raw, position=positions[i] if positions else f"record {i}")
            (events if isinstance(out, Event) else dead).append(out)  # type: ignore[arg-type]
        return events, dead

    def handle(self, events: Sequence[Event], dead_letters: Sequence[DeadLetter] = (),
               token: str | None = None) -> BatchResult:
        """Process and store one batch; raises StoreUnavailable if ClickHouse stays down."""
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
        self.store.write(outputs, dead_letters, token)
        result.stored = len(fresh)
        result.timeline_rows = len(outputs.timeline)
        emit("events_stored", len(fresh))
        emit("events_duplicate", result.duplicates)
        for letter in dead_letters:
            emit("events_dead_lettered", 1, stage=letter.stage)
        return result
