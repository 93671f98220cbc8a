"""The embedded runtime: the framed log (`log.py`) instead of Kafka, chDB instead of a server.

Everything that changes state goes through the log, in order: canonical events (E), ingest
dead letters (D) and people's incident commands (C). `drain` feeds the log to the shared
`Sink` from the position the processors' state has reached:

    snapshot position  ≤  committed  ≤  end of log
    └ inside the saved state    └ written to the store

Records between the snapshot and the committed offset were written before a restart but are
not in the loaded state: they are processed again with `write=False`. Records after the
committed offset are processed and written, and the offset moves after the store acknowledged.
So a restart (clean or SIGKILL) leaves the processors exactly where an uninterrupted run
would be, and the incident log is a function of the records alone.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ingest.redact import clip
from jobtrail.runtime.log import EmbeddedLog, Kind, Record
from jobtrail.runtime.sink import BatchResult, Sink, redact_command
from jobtrail.runtime.snapshot import SnapshotFile, adopt
from processors.incidents.model import Command, IncidentEvent, InvalidTransition
from schemas.dead_letters import DeadLetter
from schemas.events import Event

if TYPE_CHECKING:
    from jobtrail.config import Settings
    from jobtrail.store import Store
    from processors.topology import Topology

log = logging.getLogger("jobtrail.embedded")

STREAM = "embedded"


@dataclass
class CommandOutcome:
    events: list[IncidentEvent] = field(default_factory=list)
    refused: str = ""


def arrival(seq: int) -> str:
    return f"{STREAM}@{seq}"


def encode(record: Event | DeadLetter | Command) -> tuple[Kind, bytes]:
    if isinstance(record, Event):
        return "E", record.to_json().encode()
    if isinstance(record, DeadLetter):
        return "D", record.model_dump_json().encode()
    return "C", record.model_dump_json().encode()


@dataclass(frozen=True)
class _Run:
    kind: str  # "C" for one command, "E" for events and dead letters
    records: list[Record]
    write: bool


def _runs(records: Sequence[Record], committed: int) -> Iterator[_Run]:
    """Consecutive records that can be handled as one batch: same write mode, no command
    in between (a command sees exactly the events before it)."""
    current: list[Record] = []
    mode = True
    for record in records:
        write = record.seq > committed
        if record.kind == "C" or (current and write != mode):
            if current:
                yield _Run("E", current, mode)
                current = []
            if record.kind == "C":
                yield _Run("C", [record], write)
                continue
        mode = write
        current.append(record)
    if current:
        yield _Run("E", current, mode)


class EmbeddedRunner:
    """Drains the log through the sink; with `snapshots`, restarts exactly (see module)."""

    def __init__(self, sink: Sink, log: EmbeddedLog, batch_size: int = 5000, *,
                 snapshots: SnapshotFile | None = None, snapshot_every: int = 50_000,
                 snapshot_interval_s: float = 10.0) -> None:
        self.sink = sink
        self.log = log
        self.batch_size = batch_size
        self.snapshots = snapshots
        self.snapshot_every = snapshot_every
        self.snapshot_interval_s = snapshot_interval_s
        self.outcomes: dict[str, CommandOutcome] = {}
        self.restored = ""
        """How the state was restored at open (for the operator and `/healthz`)."""
        self.applied = log.committed
        self._snapshot_at = 0
        self._snapshot_time = time.monotonic()
        if snapshots is not None:
            self._open()

    # --- start ----------------------------------------------------------------------------

    def _open(self) -> None:
        assert self.snapshots is not None
        if self.log.created and self.sink.store.count("event_ids", final=False):
            self.log.mark_partial()  # a new log in front of a store with history
        loaded = self.snapshots.load()
        committed = self.log.committed
        if loaded is not None and loaded.positions.get(STREAM, 0) <= committed:
            report = adopt(self.sink, loaded)
            self.applied = self._snapshot_at = loaded.positions.get(STREAM, 0)
            self.restored = f"{report}; {committed - self.applied} stored records to replay"
        elif self.log.complete:
            # no usable snapshot, but the log holds everything from the start: replaying it
            # (stored records with write=False) rebuilds the state exactly
            problem = self.snapshots.problem if loaded is None else "snapshot ahead of the log"
            self.applied = self._snapshot_at = 0
            self.restored = f"{problem}: replaying the whole log ({committed} stored records)"
        else:
            problem = self.snapshots.problem if loaded is None else \
                "the snapshot is ahead of the committed offset (log replaced?)"
            self.restored = f"{problem}: {self.sink.restore()}"
            self.applied = self._snapshot_at = committed
        log.info("embedded runtime: %s", self.restored)
        if self.log.repaired:
            self.restored += f"; log: {self.log.repaired}"

    # --- input ----------------------------------------------------------------------------

    def submit(self, records: Sequence[Event | DeadLetter | Command]) -> int:
        """Append durably (fsync by the log's policy); returns how many were appended.
        Commands are redacted first: the log is kept on disk like any other store."""
        return len(self.log.append([encode(redact_command(r) if isinstance(r, Command) else r)
                                    for r in records]))

    def command(self, command: Command) -> CommandOutcome:
        """Through the log like everything else, then applied in order by a drain. Raises
        InvalidTransition when the incident's state refuses it (it is dead-lettered too)."""
        self.submit([command])
        self.drain()
        outcome = self.outcomes.pop(command.command_id, None) or CommandOutcome()
        if outcome.refused:
            raise InvalidTransition(outcome.refused)
        return outcome

    # --- processing -----------------------------------------------------------------------

    def drain(self, max_batches: int = 1_000_000) -> BatchResult:
        """Process everything pending; returns totals over the batches it ran."""
        total = BatchResult()
        for _ in range(max_batches):
            records = self.log.read(self.applied, self.batch_size)
            if not records:
                break
            committed = self.log.committed
            for run in _runs(records, committed):
                if run.kind == "C":
                    self._command(run.records[0], run.write)
                else:
                    total.add(self._events(run.records, run.write))
                self.applied = run.records[-1].seq
                if run.write:
                    self.log.commit(self.applied)
            if self._due():
                self.checkpoint()
        if self.snapshots is not None and self.applied - self._snapshot_at and \
                time.monotonic() - self._snapshot_time >= self.snapshot_interval_s:
            self.checkpoint()
        self._retain()
        return total

    def _events(self, records: list[Record], write: bool) -> BatchResult:
        payloads: list[bytes] = []
        positions: list[str] = []
        seqs: list[int] = []
        dead: list[DeadLetter] = []
        for record in records:
            if record.kind == "D":
                try:
                    dead.append(DeadLetter.model_validate_json(record.payload))
                    continue
                except ValueError:
                    pass  # decoded below as an event, which dead-letters it with the reason
            payloads.append(record.payload)
            positions.append(f"embedded log seq {record.seq}")
            seqs.append(record.seq)
        decoded = self.sink.decode(payloads, positions, trusted=True)
        token = f"embedded-{records[0].seq}-{records[-1].seq}"
        return self.sink.handle(decoded.events, [*dead, *decoded.dead], token=token,
                                arrivals=[arrival(seqs[i]) for i in decoded.origin],
                                write=write, raw=decoded.raw)

    def _command(self, record: Record, write: bool) -> None:
        from pydantic import ValidationError

        payload = record.payload.decode("utf-8", "replace")
        try:
            command = Command.model_validate_json(record.payload)
        except ValidationError as exc:
            self._refuse(None, record, payload, f"not a command: {exc.errors()[0]['msg']}",
                         write)
            return
        try:
            events = self.sink.command(command, write=write)
        except InvalidTransition as exc:
            self._refuse(command, record, payload, str(exc), write)
            return
        if write:
            self._outcome(command.command_id, CommandOutcome(events))

    def _outcome(self, command_id: str, outcome: CommandOutcome) -> None:
        """Kept for the caller of `command`; bounded, because a command recovered from the
        log after a crash has no caller waiting."""
        self.outcomes[command_id] = outcome
        while len(self.outcomes) > 1000:
            self.outcomes.pop(next(iter(self.outcomes)))

    def _refuse(self, command: Command | None, record: Record, payload: str, reason: str,
                write: bool) -> None:
        if command is not None and write:
            self._outcome(command.command_id, CommandOutcome(refused=reason))
        if not write:
            return
        letter = DeadLetter(
            id=DeadLetter.make_id("incident.command", payload, arrival(record.seq)),
            stage="incident.command", reason=clip(reason, 500), payload=clip(payload, 100_000),
            event_ref=arrival(record.seq),
            received_at=command.time if command else _epoch())
        self.sink.store.write_dead_letters([letter])

    # --- snapshots and retention ----------------------------------------------------------

    def _due(self) -> bool:
        if self.snapshots is None:
            return False
        return (self.applied - self._snapshot_at >= self.snapshot_every
                or time.monotonic() - self._snapshot_time >= self.snapshot_interval_s)

    def checkpoint(self) -> None:
        """Save the processors' state at the current position (no-op without snapshots)."""
        if self.snapshots is None or self.applied == self._snapshot_at:
            return
        size = self.snapshots.save(self.sink.pipeline, {STREAM: self.applied},
                                   self.sink.clusters)
        self._snapshot_at = self.applied
        self._snapshot_time = time.monotonic()
        log.debug("snapshot at %s: %d bytes", arrival(self.applied), size)

    def _retain(self) -> None:
        keep = min(self.log.committed, self._snapshot_at) if self.snapshots else \
            self.log.committed
        self.log.retain(keep)

    def close(self) -> None:
        """Drain what is pending and save the state (a clean stop replays nothing)."""
        self.drain()
        self.checkpoint()
        self._retain()


def _epoch() -> datetime:
    return datetime.fromtimestamp(0, tz=UTC)


class EmbeddedRuntime:
    """The embedded runtime behind the CLI and the HTTP API: holds the home (one process),
    the store, the log and the runner."""

    mode = "embedded"

    def __init__(self, settings: Settings, *, topology: Topology | None = None,
                 store: Store | None = None) -> None:
        from jobtrail.runtime.build import build_sink, open_store
        from jobtrail.runtime.home import HomeLock

        self.settings = settings
        self.lock = HomeLock(settings.home).acquire()
        self.store = store or open_store(settings)
        sink = build_sink(settings, self.store, topology, restore=False)
        self.runner = EmbeddedRunner(
            sink, EmbeddedLog(settings.home / "log", fsync=settings.log_fsync),
            batch_size=settings.batch_size,
            snapshots=SnapshotFile(settings.home / "state" / "pipeline.snap"),
            snapshot_interval_s=settings.snapshot_interval_s)

    @property
    def sink(self) -> Sink:
        return self.runner.sink

    def submit(self, records: Sequence[Event | DeadLetter]) -> int:
        return self.runner.submit(records)

    def command(self, command: Command) -> list[IncidentEvent] | None:
        return self.runner.command(command).events

    def drain(self) -> BatchResult:
        return self.runner.drain()

    def topology(self) -> Topology:
        """The live wiring the processors use (file plus applied `topology.link` events)."""
        return self.runner.sink.pipeline.topology

    def health(self) -> dict[str, object]:
        checks: dict[str, object] = {"mode": self.mode, "restored": self.runner.restored,
                                     "pending": self.runner.log.pending}
        try:
            self.store.ping()
            checks["store"] = "ok"
        except Exception as exc:  # readiness says why, it does not raise
            checks["store"] = f"unavailable: {type(exc).__name__}: {exc}"
        return checks

    def close(self) -> None:
        self.runner.close()
