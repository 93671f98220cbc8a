"""Processor state per input partition, so partitions can move between workers.

Events are keyed by cluster and incident commands by their incident's cluster, so everything
the processors of one partition decide depends only on that partition of `jobtrail.events`
and of `jobtrail.incident-commands` (Faust gives both to the same worker: it co-partitions
topics with equal partition counts, which the worker checks at start). A worker holds one
`Shard` — a `Sink` with its own `Pipeline` — per partition it owns.

State moves between workers through the store (`worker_state`, newest version wins):
- saved every `snapshot_interval_s`, after every batch of commands, and when Faust revokes the
  partition (after it committed what was acked) or the worker stops;
- loaded when a partition is first seen. The records between the saved position and the
  group's committed offset (the previous owner wrote and committed them after its last save)
  are read back from Kafka and replayed without writing. So the state is exactly the one an
  uninterrupted run would hold, and the incident log is the same whoever ran what.

Records at or before a shard's position are already inside its state (a redelivery after a
crash) and are skipped. Commands never need replaying: a state is saved after each batch of
them, before it is acknowledged, so replaying events alone keeps their order.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from ingest.redact import clip, error_text
from jobtrail.runtime.kafka_io import PartitionReader, Record
from jobtrail.runtime.sink import Publish, Sink
from jobtrail.runtime.snapshot import adopt, dumps, loads
from jobtrail.store import Store
from jobtrail.telemetry import gauge
from processors.incidents.model import Command
from schemas.dead_letters import DeadLetter

log = logging.getLogger("jobtrail.worker")


class PartialStore(RuntimeError):
    """The group's committed offsets are ahead of what this store holds."""

def owner_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def split_messages(records: Sequence[Record]) -> tuple[list[bytes], list[str], list[bool]]:
    """JSON-lines message values -> one value per line, each with its arrival
    `topic/partition@offset#line` (what the sink compares to recognise a replay) and whether
    its message was signed."""
    values: list[bytes] = []
    where: list[str] = []
    trusted: list[bool] = []
    for record in records:
        lines = [line for line in record.value.split(b"\n") if line.strip()] or [record.value]
        for number, line in enumerate(lines):
            values.append(line)
            where.append(f"{record.where}#{number}")
            trusted.append(record.signed)
    return values, where, trusted


def _token(records: Sequence[Record]) -> str:
    """Kafka offsets are unique per topic-partition: a retried batch gets the same token."""
    first, last = records[0], records[-1]
    return f"{first.topic}-{first.partition}-{first.offset}-{last.offset}"


@dataclass
class Shard:
    partition: int
    sink: Sink
    positions: dict[str, int] = field(default_factory=dict)
    """Input stream (`topic/partition`) -> the last offset whose record is in the state."""
    saved: dict[str, int] = field(default_factory=dict)
    saved_at: float = 0.0
    restored: str = ""

    def position(self, stream: str) -> int:
        return self.positions.get(stream, -1)


class Shards:
    """The shards a worker holds. Every method runs on the worker's one store thread."""

    def __init__(self, *, app_id: str, events_topic: str, commands_topic: str, store: Store,
                 make_sink: Callable[[], Sink], reader: PartitionReader,
                 snapshot_interval_s: float = 10.0, owner: str = "") -> None:
        self.app_id = app_id
        self.events_topic = events_topic
        self.commands_topic = commands_topic
        self.store = store
        self.make_sink = make_sink
        self.reader = reader
        self.snapshot_interval_s = snapshot_interval_s
        self.owner = owner or owner_name()
        self.held: dict[int, Shard] = {}

    def _events_stream(self, partition: int) -> str:
        return f"{self.events_topic}/{partition}"

    def _commands_stream(self, partition: int) -> str:
        return f"{self.commands_topic}/{partition}"

    def _key(self, partition: int) -> str:
        return self._events_stream(partition)

    # --- holding ----------------------------------------------------------------------------

    def shard(self, partition: int) -> Shard:
        """The shard of `partition`, loaded and caught up the first time it is asked for."""
        held = self.held.get(partition)
        if held is None:
            held = self.held[partition] = self._load(partition)
            gauge("shards_held", len(self.held))
        return held

    def _load(self, partition: int) -> Shard:
        started = time.monotonic()
        sink = self.make_sink()
        shard = Shard(partition, sink, saved_at=time.monotonic())
        saved = self.store.load_state(self.app_id, self._key(partition))
        problem = "no saved state"
        if saved is not None:
            snapshot, problem = loads(saved[1], f"the saved state of {self._key(partition)}")
            if snapshot is not None:
                adopt(sink, snapshot)
                shard.positions = dict(snapshot.positions)
                shard.saved = dict(snapshot.positions)
        stream = self._events_stream(partition)
        committed, earliest, _ = self.reader.bounds(self.events_topic, partition)
        start = shard.position(stream) + 1
        end = committed if committed is not None else earliest
        if saved is None and end > max(start, earliest):
            self._check_store_holds(partition, max(start, earliest), end)
        state = "no saved state" if problem else f"state at offset {start - 1}"
        if start < end and start < earliest:
            # records the state lacks are no longer in Kafka: rebuild from the store instead
            report = sink.restore()
            shard.positions[stream] = end - 1
            shard.restored = (f"{problem or state}; Kafka starts at {earliest}: {report} "
                              "(approximate)")
        else:
            replayed = self._replay(shard, start, end)
            shard.restored = f"{problem or state}; replayed {replayed} records up to {end}"
        log.warning("partition %d: %s (%.1f s)", partition, shard.restored,
                    time.monotonic() - started)
        return shard

    def verify(self, partitions: set[int]) -> None:
        """At assignment, before any record arrives (a group at the end of its topics gets
        none): refuse a store that lacks what the group committed (`PartialStore`)."""
        unheld = sorted(partitions - set(self.held))
        if not unheld:
            return
        # one cheap query for all of them: a rebalance must not wait on state bodies
        saved = {row[0] for row in self.store.retry.run(lambda: self.store.client.query(
            "SELECT DISTINCT shard FROM worker_state WHERE app_id = {app:String}",
            parameters={"app": self.app_id})).result_rows}
        unsaved = [p for p in unheld if self._key(p) not in saved]
        group = self.reader.committed(self.events_topic) if unsaved else {}
        for partition in unsaved:
            if partition not in group:
                continue  # nothing committed: nothing the store could lack
            committed, earliest, _ = self.reader.bounds(self.events_topic, partition)
            if committed is not None and committed > earliest:
                self._check_store_holds(partition, earliest, committed)

    def _check_store_holds(self, partition: int, start: int, end: int) -> None:
        """The group committed records this store has no state for: they must be in the
        store (a worker that crashed before its first save), else this is not the store the
        group wrote to (a new `./var`, another ClickHouse) and replaying without writing
        would build a store missing those attempts and infrastructure rows."""
        probe = self.reader.read(self.events_topic, partition, max(start, end - 20), end)
        ids: list[str] = []
        for value in split_messages(probe)[0]:
            try:
                found = json.loads(value).get("id")
            except (ValueError, AttributeError):
                continue
            if isinstance(found, str):
                ids.append(found)
        if not ids or self.store.arrivals(ids):
            return
        raise PartialStore(
            f"consumer group {self.app_id!r} already committed offset {end} of "
            f"{self._events_stream(partition)}, but this store holds neither that partition's "
            f"state nor the events it committed ({len(ids)} checked): it is not the store "
            "this group wrote to. Point JOBTRAIL_CLICKHOUSE (or --home) at that store, or "
            "rebuild this one from the topic's beginning with a new group "
            "(JOBTRAIL_APP_ID=<new name>) or after resetting this group's offsets "
            "(kafka-consumer-groups.sh --group <app id> --reset-offsets --to-earliest "
            "--all-topics --execute)")

    def _replay(self, shard: Shard, start: int, end: int) -> int:
        """Records [start, end) of the shard's events partition, processed without writing:
        they are stored already, the state has to catch up with them."""
        if start >= end:
            return 0
        records = self.reader.read(self.events_topic, shard.partition, start, end)
        for i in range(0, len(records), 2000):
            self._process(shard, records[i:i + 2000], None, write=False)
        return len(records)

    def release(self, partitions: set[int]) -> None:
        """Save and drop the shards of revoked partitions (the next owner loads them)."""
        for partition in sorted(partitions):
            shard = self.held.pop(partition, None)
            if shard is not None:
                self.save(shard)
        gauge("shards_held", len(self.held))

    def close(self) -> None:
        self.release(set(self.held))

    # --- input ------------------------------------------------------------------------------

    def events(self, partition: int, records: Sequence[Record],
               publish: Publish | None) -> list[DeadLetter]:
        """Process and store one partition's batch; returns the decode dead letters, which
        the caller produces to the DLQ before acknowledging the batch."""
        shard = self.shard(partition)
        stream = self._events_stream(partition)
        fresh = [r for r in records if r.offset > shard.position(stream)]
        if not fresh:
            return []
        if fresh[0].offset > shard.position(stream) + 1 and shard.position(stream) >= 0:
            # a hole between the state and this batch (offsets skipped by a reset): catch up
            self._replay(shard, shard.position(stream) + 1, fresh[0].offset)
        dead = self._process(shard, fresh, publish, write=True)
        self._maybe_save(shard)
        return dead

    def _process(self, shard: Shard, records: Sequence[Record], publish: Publish | None, *,
                 write: bool) -> list[DeadLetter]:
        values, where, trusted = split_messages(records)
        decoded = shard.sink.decode(values, where, trusted=trusted)
        shard.sink.handle(decoded.events, (), _token(records), publish,
                          arrivals=[where[i] for i in decoded.origin], write=write,
                          raw=decoded.raw)
        stream = self._events_stream(shard.partition)
        shard.positions[stream] = max(shard.position(stream), records[-1].offset)
        gauge("shard_position", shard.positions[stream], stream=stream)
        return decoded.dead

    def commands(self, partition: int, records: Sequence[Record],
                 publish: Publish | None) -> list[DeadLetter]:
        """People's commands for incidents this partition holds; a refused one is a dead
        letter saying why. The state is saved before the caller acknowledges them."""
        shard = self.shard(partition)
        stream = self._commands_stream(partition)
        letters: list[DeadLetter] = []
        for record in records:
            if record.offset <= shard.position(stream):
                continue
            try:
                command = Command.model_validate_json(record.value)
                shard.sink.command(command, publish)
            except ValueError as exc:  # InvalidTransition is a ValueError too
                text = record.value.decode("utf-8", "replace")
                letters.append(DeadLetter(
                    id=DeadLetter.make_id("incident.command", text, record.where),
                    stage="incident.command", reason=error_text(exc),
                    payload=clip(text, 10000), event_ref=record.where,
                    received_at=datetime.fromtimestamp(record.timestamp, tz=UTC)))
            shard.positions[stream] = record.offset
        if shard.positions != shard.saved:
            self.save(shard)
        return letters

    # --- saving -----------------------------------------------------------------------------

    def _maybe_save(self, shard: Shard) -> None:
        if time.monotonic() - shard.saved_at >= self.snapshot_interval_s:
            self.save(shard)

    def save(self, shard: Shard) -> None:
        if shard.positions == shard.saved:
            shard.saved_at = time.monotonic()
            return
        positions = dict(shard.positions)
        body = dumps(shard.sink.pipeline, positions, shard.sink.clusters)
        self.store.save_state(self.app_id, self._key(shard.partition), positions, body,
                              self.owner)
        shard.saved = positions
        shard.saved_at = time.monotonic()
        log.info("partition %d: state saved at %s (%d bytes)", shard.partition, positions,
                 len(body))

    def describe(self) -> dict[str, object]:
        """What this worker holds, for `/healthz` (called from the event loop while the store
        thread works: copies first)."""
        held = dict(self.held)
        return {str(p): {"positions": dict(s.positions), "restored": s.restored}
                for p, s in sorted(held.items())}
