"""Where `jobtrail collect slurm` stands and how it reads: the crash-safe cursor, the
slurmctld log follower (across rotation and truncation), the sink and the Slurm command runner."""

from __future__ import annotations

import json
import logging
import os
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ingest.canonical import Decoded

log = logging.getLogger("jobtrail.collect.slurm")


class Sink(Protocol):
    def submit(self, records: Sequence[Decoded]) -> int:
        """Durable before it returns."""


Runner = Callable[[list[str]], str]


def run_tool(argv: list[str]) -> str:
    """A Slurm client command's stdout (bounded: a hung controller costs one poll)."""
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}")
    return done.stdout


@dataclass
class Cursor:
    """Where the collector stands; saved atomically (write, fsync, rename)."""

    log_inode: int = 0
    log_offset: int = 0
    requeues: dict[str, int] = field(default_factory=dict)
    job_nodes: dict[str, list[str]] = field(default_factory=dict)
    down_at: dict[str, float] = field(default_factory=dict)
    accounts: dict[str, str] = field(default_factory=dict)
    alloc: dict[str, dict[str, Any]] = field(default_factory=dict)
    """GPUs of running jobs as squeue showed them, for the log's allocation lines."""
    sent: dict[str, list[str]] = field(default_factory=dict)
    """Ids already acknowledged, by job (pruned when the controller forgets the job)."""
    nodes: dict[str, str] = field(default_factory=dict)
    """sinfo mode: the last node state key sent, by node."""
    drills: dict[str, str] = field(default_factory=dict)
    """Jobs `jobtrail drill run` submitted (name `jobtrail-drill`, the drill id as comment)."""

    @classmethod
    def load(cls, path: Path) -> Cursor:
        if not path.exists():
            return cls()
        data = json.loads(path.read_text())
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        with tmp.open("w") as f:
            json.dump(self.__dict__, f, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class LogFollower:
    """Complete lines appended to a log, across rotation (rename + new file: the rest of the
    old file first, found again after a restart as `<log>.1`) and truncation (copytruncate)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _open_at(self, cursor: Cursor) -> tuple[Path | None, int]:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None, 0
        if cursor.log_inode in (0, st.st_ino):
            if st.st_size < cursor.log_offset:  # truncated in place
                cursor.log_offset = 0
            cursor.log_inode = st.st_ino
            return self.path, cursor.log_offset
        rotated = self.path.with_name(self.path.name + ".1")
        if rotated.exists() and rotated.stat().st_ino == cursor.log_inode:
            return rotated, cursor.log_offset
        log.warning("slurmctld log %s was replaced and the old file is gone: reading the new "
                    "one from its start", self.path)
        cursor.log_inode, cursor.log_offset = st.st_ino, 0
        return self.path, 0

    def read(self, cursor: Cursor, limit: int = 4 << 20) -> tuple[list[str], Cursor]:
        """New complete lines and the cursor after them (the caller saves it once sent)."""
        after = Cursor(**{**cursor.__dict__})
        lines: list[str] = []
        for _ in range(3):  # the rest of a rotated file, then the new one
            path, offset = self._open_at(after)
            if path is None:
                break
            with path.open("rb") as f:
                f.seek(offset)
                chunk = f.read(limit)
            end = chunk.rfind(b"\n") + 1
            lines += chunk[:end].decode("utf-8", "replace").splitlines()
            after.log_offset = offset + end
            if path == self.path or end < len(chunk) or len(chunk) == limit:
                break
            after.log_inode, after.log_offset = self.path.stat().st_ino, 0  # old file done
        return lines, after
