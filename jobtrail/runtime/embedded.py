"""The embedded runtime: an in-process ordered log instead of Kafka, chDB instead of a server.

`EmbeddedLog` is a tiny append-only file log with a committed offset, the same contract a
Kafka partition gives the Faust worker: an accepted record is durable before the caller is
told so, and processing resumes after the last committed offset. The runner drains it
through the shared `Sink`, so a crash between "stored" and "committed" replays records that
the sink recognises by id.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from jobtrail.runtime.sink import BatchResult, Sink
from schemas.dead_letters import DeadLetter
from schemas.events import Event

_DEAD_PREFIX = b"D"
_EVENT_PREFIX = b"E"


class EmbeddedLog:
    """Records are lines `E{json}` (event) or `D{json}` (dead letter); offsets count lines."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / "log.jsonl"
        self.offset_path = directory / "committed"
        self.path.touch(exist_ok=True)

    def append(self, records: Iterable[Event | DeadLetter]) -> int:
        lines = [
            (_EVENT_PREFIX if isinstance(r, Event) else _DEAD_PREFIX)
            + r.model_dump_json(exclude_none=True).encode() + b"\n"
            for r in records
        ]
        with self.path.open("ab") as fh:
            fh.writelines(lines)
            fh.flush()
            os.fsync(fh.fileno())
        return len(lines)

    @property
    def position(self) -> tuple[int, int]:
        """(records, bytes) committed so far."""
        try:
            records, _, size = self.offset_path.read_text().strip().partition(" ")
            return int(records or 0), int(size or 0)
        except FileNotFoundError:
            return 0, 0

    @property
    def committed(self) -> int:
        return self.position[0]

    def commit(self, records: int, size: int) -> None:
        tmp = self.offset_path.with_suffix(".tmp")
        tmp.write_text(f"{records} {size}")
        os.replace(tmp, self.offset_path)  # atomic: a crash leaves the old or the new offset

    def read(self, byte_offset: int, limit: int) -> tuple[list[bytes], int]:
        """Up to `limit` whole records from `byte_offset`; returns them and the next offset."""
        out: list[bytes] = []
        with self.path.open("rb") as fh:
            fh.seek(byte_offset)
            position = byte_offset
            while len(out) < limit:
                line = fh.readline()
                if not line.endswith(b"\n"):  # end of file, or a torn last line
                    break
                out.append(line[:-1])
                position += len(line)
        return out, position

    def compact(self) -> None:
        """Drop everything committed once nothing is pending (keeps the file small)."""
        _records, size = self.position
        if size and size == self.path.stat().st_size:
            self.path.write_bytes(b"")
            self.commit(0, 0)


class EmbeddedRunner:
    def __init__(self, sink: Sink, log: EmbeddedLog, batch_size: int = 5000) -> None:
        self.sink = sink
        self.log = log
        self.batch_size = batch_size

    def submit(self, records: Sequence[Event | DeadLetter]) -> int:
        return self.log.append(records)

    def drain(self, max_batches: int = 1_000_000) -> BatchResult:
        """Process everything pending; returns totals over the batches it ran."""
        total = BatchResult()
        for _ in range(max_batches):
            start, byte_offset = self.log.position
            lines, next_offset = self.log.read(byte_offset, self.batch_size)
            if not lines:
                break
            events: list[bytes] = []
            positions: list[str] = []
            dead: list[DeadLetter] = []
            for i, line in enumerate(lines):
                if line.startswith(_DEAD_PREFIX):
                    dead.append(DeadLetter.model_validate_json(line[1:]))
                else:
                    events.append(line[1:])
                    positions.append(f"embedded log offset {start + i}")
            decoded, decode_dead = self.sink.decode(events, positions)
            # offsets restart after compaction, so the dedup token hashes the content
            token = "embedded-" + hashlib.sha256(b"\n".join(lines)).hexdigest()[:32]
            result = self.sink.handle(decoded, [*dead, *decode_dead], token=token)
            self.log.commit(start + len(lines), next_offset)
            total.received += result.received
            total.stored += result.stored
            total.duplicates += result.duplicates
            total.timeline_rows += result.timeline_rows
            total.dead_letters.extend(result.dead_letters)
        self.log.compact()
        return total
