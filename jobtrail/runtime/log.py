"""The embedded log: what a Kafka partition is to the worker, in files under the home.

Records are framed: `magic | kind | seq | length | crc32 | payload`, appended to segment files
named by their first sequence number. Every record has a sequence number that never repeats
(it survives segment deletion), which is what the sink uses as the record's *arrival*: the
same record read again after a crash has the same arrival, a re-sent copy has another.

Durability: `append` writes all its records with one `write` and fsyncs before returning
(`fsync="always"`, the default), so "accepted" means on disk. A process killed mid-append
leaves a torn last frame; opening the log finds it (short header, short payload or a checksum
mismatch), cuts the file back to the last whole frame and says so. Nothing after a torn frame
was ever acknowledged, so cutting it loses nothing that was promised.

Two offsets live beside the segments: `committed` (records up to it are fully written to the
store) and the snapshot's own position (records up to it are inside the saved processor
state; `jobtrail.runtime.snapshot`). Segments wholly below both are deleted.
"""

from __future__ import annotations

import logging
import os
import struct
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

log = logging.getLogger("jobtrail.log")

MAGIC = b"JTL1"
_HEADER = struct.Struct(">4scQII")  # magic, kind, seq, payload length, crc32 of payload
MAX_RECORD = 64 * 1024 * 1024
SEGMENT_BYTES = 64 * 1024 * 1024

Kind = Literal["E", "D", "C"]
"""E: a canonical event, D: a dead letter from ingest, C: an incident command."""
FsyncPolicy = Literal["always", "never"]


class LogCorrupt(RuntimeError):
    """A frame in the middle of the log does not check out (not a torn tail)."""


@dataclass(frozen=True)
class Record:
    seq: int
    kind: Kind
    payload: bytes


def _frame(seq: int, kind: Kind, payload: bytes) -> bytes:
    if len(payload) > MAX_RECORD:
        raise ValueError(f"record of {len(payload)} bytes is larger than {MAX_RECORD}")
    return _HEADER.pack(MAGIC, kind.encode(), seq, len(payload), zlib.crc32(payload)) + payload


def _scan(path: Path) -> tuple[list[tuple[int, int]], int, str]:
    """(seq, byte offset) of every whole frame, the end of the last one, and why the scan
    stopped early ('' when the file ended exactly on a frame boundary)."""
    frames: list[tuple[int, int]] = []
    size = path.stat().st_size
    position = 0
    with path.open("rb") as fh:
        while position < size:
            header = fh.read(_HEADER.size)
            if len(header) < _HEADER.size:
                return frames, position, "short header"
            magic, _kind, seq, length, crc = _HEADER.unpack(header)
            if magic != MAGIC:
                return frames, position, "bad magic"
            payload = fh.read(length)
            if len(payload) < length:
                return frames, position, "short payload"
            if zlib.crc32(payload) != crc:
                return frames, position, "checksum mismatch"
            frames.append((seq, position))
            position += _HEADER.size + length
    return frames, position, ""


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class EmbeddedLog:
    """Append-only, framed, segmented; one writer (the process holding the home lock)."""

    def __init__(self, directory: Path, fsync: FsyncPolicy = "always",
                 segment_bytes: int = SEGMENT_BYTES) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.fsync = fsync
        self.segment_bytes = segment_bytes
        self._committed_path = directory / "committed.seq"
        self._origin_path = directory / "origin"
        self.repaired = ""
        """What opening the log had to do (a torn tail cut), for the operator."""
        self.created = False
        """True when this open created the log (its `origin` says whether it is complete)."""
        if not self._origin_path.exists():
            fresh = not any(directory.glob("*.seg")) and not self._committed_path.exists() \
                and not (directory / "log.jsonl").exists()
            self._origin_path.write_text("complete" if fresh else "partial")
            self.created = fresh
        self._migrate_jsonl()
        self._segments = self._list()
        self._next = self._open_tail()
        self._cursor: tuple[int, Path, int] | None = None

    # --- layout ---------------------------------------------------------------------------

    def _list(self) -> list[tuple[int, Path]]:
        out = []
        for path in self.directory.glob("*.seg"):
            try:
                out.append((int(path.stem), path))
            except ValueError:
                continue
        return sorted(out)

    def _open_tail(self) -> int:
        """Check the active segment, cut a torn tail; returns the next sequence number."""
        if not self._segments:
            return max(1, self.committed + 1)
        first, path = self._segments[-1]
        frames, end, why = _scan(path)
        size = path.stat().st_size
        if end < size:
            self.repaired = (f"cut a torn tail of {size - end} bytes from {path.name} "
                             f"({why}) after seq {frames[-1][0] if frames else first - 1}")
            log.warning("embedded log: %s", self.repaired)
            with path.open("r+b") as fh:
                fh.truncate(end)
                fh.flush()
                os.fsync(fh.fileno())
        if frames:
            return frames[-1][0] + 1
        return first

    # --- writing --------------------------------------------------------------------------

    def append(self, records: Sequence[tuple[Kind, bytes]]) -> list[int]:
        """Append and (by policy) fsync; returns the records' sequence numbers."""
        if not records:
            return []
        seqs = list(range(self._next, self._next + len(records)))
        blob = b"".join(_frame(seq, kind, payload)
                        for seq, (kind, payload) in zip(seqs, records, strict=True))
        path = self._active(len(blob))
        with path.open("ab") as fh:
            fh.write(blob)
            fh.flush()
            if self.fsync == "always":
                os.fsync(fh.fileno())
        self._next = seqs[-1] + 1
        return seqs

    def _active(self, incoming: int) -> Path:
        if self._segments:
            _, path = self._segments[-1]
            if path.stat().st_size + incoming <= self.segment_bytes or \
                    path.stat().st_size == 0:
                return path
        path = self.directory / f"{self._next:020d}.seg"
        path.touch()
        if self.fsync == "always":
            _fsync_dir(self.directory)
        self._segments.append((self._next, path))
        return path

    # --- reading --------------------------------------------------------------------------

    def mark_partial(self) -> None:
        """The store already held history when this log was created: replaying the log
        alone cannot rebuild it."""
        self._origin_path.write_text("partial")

    @property
    def complete(self) -> bool:
        """Whether the log still holds every record since it was created (seq 1 on): then
        replaying it rebuilds the processors exactly, with no snapshot at all."""
        if self._origin_path.read_text().strip() != "complete":
            return False
        return not self._segments or self._segments[0][0] == 1

    @property
    def end(self) -> int:
        """The sequence number the next appended record will get."""
        return self._next

    def read(self, after: int, limit: int) -> list[Record]:
        """Up to `limit` records with seq > `after`, in order."""
        out: list[Record] = []
        for record in self._iter(after):
            out.append(record)
            if len(out) >= limit:
                break
        return out

    def _iter(self, after: int) -> Iterator[Record]:
        # a drain reads batch after batch: resume where the last read stopped instead of
        # walking the segment's headers again
        start_path, start_offset = None, 0
        if self._cursor is not None and self._cursor[0] == after:
            _, start_path, start_offset = self._cursor
        for i, (_first, path) in enumerate(self._segments):
            following = self._segments[i + 1][0] if i + 1 < len(self._segments) else None
            if following is not None and following <= after + 1:
                continue  # every record here is at or before `after`
            if start_path is not None and path != start_path:
                continue
            with path.open("rb") as fh:
                position = start_offset if path == start_path else 0
                start_path = None
                fh.seek(position)
                while True:
                    header = fh.read(_HEADER.size)
                    if len(header) < _HEADER.size:
                        break
                    magic, kind, seq, length, crc = _HEADER.unpack(header)
                    if magic != MAGIC:
                        raise LogCorrupt(f"{path.name}: bad magic at byte {position}")
                    if seq <= after:
                        fh.seek(length, os.SEEK_CUR)
                        position += _HEADER.size + length
                        continue
                    payload = fh.read(length)
                    if len(payload) < length or zlib.crc32(payload) != crc:
                        raise LogCorrupt(f"{path.name}: seq {seq} does not check out")
                    position += _HEADER.size + length
                    self._cursor = (seq, path, position)
                    yield Record(seq, kind.decode(), payload)

    # --- offsets and retention ------------------------------------------------------------

    @property
    def committed(self) -> int:
        """The last sequence number whose outputs are fully written to the store."""
        try:
            return int(self._committed_path.read_text().strip() or 0)
        except FileNotFoundError:
            return 0

    def commit(self, seq: int) -> None:
        tmp = self._committed_path.with_suffix(".tmp")
        tmp.write_text(str(seq))
        if self.fsync == "always":
            with tmp.open("rb") as fh:
                os.fsync(fh.fileno())
        os.replace(tmp, self._committed_path)  # atomic: the old or the new offset

    @property
    def pending(self) -> int:
        return max(0, self._next - 1 - self.committed)

    def retain(self, keep_after: int) -> int:
        """Delete segments whose every record is at or before `keep_after`; returns how many.
        The active segment is kept (appends go there)."""
        removed = 0
        while len(self._segments) > 1 and self._segments[1][0] <= keep_after + 1:
            _, path = self._segments.pop(0)
            path.unlink(missing_ok=True)
            if self._cursor is not None and self._cursor[1] == path:
                self._cursor = None
            removed += 1
        return removed

    # --- the pre-framing format -----------------------------------------------------------

    def _migrate_jsonl(self) -> None:
        """Homes written before framing had `log.jsonl` (lines `E{json}`/`D{json}`) and a
        `committed` file `records bytes`; their unprocessed tail is re-appended, framed."""
        old = self.directory / "log.jsonl"
        if not old.exists():
            return
        byte_offset = 0
        legacy = self.directory / "committed"
        if legacy.exists():
            parts = legacy.read_text().split()
            byte_offset = int(parts[1]) if len(parts) > 1 else 0
        data = old.read_bytes()[byte_offset:]
        lines = [line for line in data.split(b"\n") if line[:1] in (b"E", b"D")]
        if data and not data.endswith(b"\n"):
            lines = lines[:-1]  # the torn last line was never acknowledged
        self._segments = self._list()
        self._next = self._open_tail()
        self.append([(line[:1].decode(), line[1:]) for line in lines])  # type: ignore[misc]
        old.unlink()
        legacy.unlink(missing_ok=True)
        log.warning("embedded log: migrated %d unprocessed records from log.jsonl", len(lines))
