"""Processor state saved beside the position it reflects, so a restart resumes exactly.

The incident log must be a function of the input alone, whatever the batching, splitting and
restarts. Rebuilding the processors' memory from the store can only approximate that (which
signals were remembered, which timers were armed, in which order things arrived), so each
runtime saves the whole `Pipeline` with the input positions it has consumed, and on start
loads it and replays only what came after.

A snapshot is a pickle (written and read only by this process's own home; never load one
from elsewhere) behind a header: a format number and a fingerprint of the state's classes.
A snapshot from other code (a field added or renamed), an unreadable file, or a missing one
is reported and the runtime falls back to rebuilding from the store: it always starts.
The topology is kept unless the topology file changed, in which case it is rebuilt from the
new file and the stored `topology.link` events.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from processors.pipeline import Pipeline

if TYPE_CHECKING:
    from jobtrail.runtime.sink import Sink

log = logging.getLogger("jobtrail.snapshot")

STATE_VERSION = 7
"""Bump when the meaning of stored state changes without its shape changing (2: the incident
model moved into `processors.incidents.aggregate`, so pickled class paths changed; 3: a
snapshot holds the sink's pipeline per cluster; 4: the book's incidents are those in memory,
evicted ones read back from the store; 5: the lateness journal holds events as JSON and its
checkpoints compressed; 6: it counts its replay budget and the events since its last
checkpoint; 7: the book packs its signals, and a checkpoint holds their events' JSON by
reference. State saved before is rebuilt from the store, as designed)."""
_MAGIC = b"JTSNAP"


def _shape(obj: Any) -> list[str]:
    if dataclasses.is_dataclass(obj):
        return sorted(f.name for f in dataclasses.fields(obj))
    fields = getattr(obj, "model_fields", None)
    if isinstance(fields, dict):
        return sorted(fields)
    return sorted(vars(obj))


def fingerprint() -> str:
    """A digest of the shapes of every class the state is made of."""
    from processors import attempts, pipeline, timeline, topology
    from processors.incidents import book, model
    from processors.postmortem import state as postmortem
    from schemas.events import Event

    fresh = pipeline.Pipeline()
    parts = [f"v{STATE_VERSION}"]
    for name, shape in [
        ("Pipeline", _shape(fresh)), ("Detector", _shape(fresh.detector)),
        ("Book", _shape(book.Book)),
        ("Membership", _shape(fresh.membership)), ("Topology", _shape(fresh.topology)),
        ("Attempt", _shape(attempts.Attempt)), ("JobRecord", _shape(attempts.JobRecord)),
        ("Span", _shape(timeline.Span)), ("Link", _shape(topology.Link)),
        ("Lateness", _shape(fresh.reorder)), ("Incident", _shape(model.Incident)),
        ("JobImpact", _shape(model.JobImpact)),
        ("Evidence", _shape(model.Evidence)), ("Action", _shape(model.Action)),
        ("Signal", _shape(book.Signal)), ("Progress", _shape(book.Progress)),
        ("Event", _shape(Event)), ("Postmortem", _shape(postmortem.Postmortem)),
        ("Section", _shape(postmortem.Section)), ("Learning", _shape(postmortem.Learning)),
    ]:
        parts.append(f"{name}:{','.join(shape)}")
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


@dataclass
class Snapshot:
    pipeline: Pipeline
    positions: dict[str, int] = field(default_factory=dict)
    """Input stream -> the last offset whose record is inside this state."""
    topology_origin: str = ""
    clusters: dict[str, Pipeline] = field(default_factory=dict)
    """The sink's pipeline per cluster (`pipeline` among them once a cluster claimed it)."""


def adopt(sink: Sink, snapshot: Snapshot) -> str:
    """Install a loaded snapshot's pipeline in `sink` under this run's rules (and topology,
    when the file changed); returns what it did, for the operator."""
    current = sink.pipeline
    rebuilt = None
    if snapshot.topology_origin != current.topology.origin:
        from jobtrail.store.queries import wiring

        rebuilt = wiring(sink.store, current.topology)
    sink.pipeline = snapshot.pipeline
    sink.clusters = dict(snapshot.clusters)
    for pipeline in sink.pipelines():
        pipeline.bind(current.detector.rules, rebuilt, current.lateness)
        pipeline.eviction = current.eviction
    sink.bind_archives()
    where = ", ".join(f"{k}@{v}" for k, v in sorted(snapshot.positions.items())) or "start"
    return f"snapshot at {where}" + (
        "; the topology file changed: rewired from the new file and the stored links"
        if rebuilt is not None else "")


def dumps(pipeline: Pipeline, positions: dict[str, int],
          clusters: dict[str, Pipeline] | None = None) -> bytes:
    """The state and its positions as bytes: a header (format, class fingerprint) and a
    pickle. `clusters`: the sink's pipeline per cluster (`Sink.clusters`)."""
    body = pickle.dumps(Snapshot(pipeline, dict(positions), pipeline.topology.origin,
                                 dict(clusters or {})), protocol=pickle.HIGHEST_PROTOCOL)
    return _MAGIC + fingerprint().encode() + b"\n" + body


def loads(data: bytes, where: str) -> tuple[Snapshot | None, str]:
    """(the snapshot, "") or (None, why it cannot be used) for bytes `dumps` wrote."""
    header, _, body = data.partition(b"\n")
    if not header.startswith(_MAGIC):
        return None, f"{where} is not a jobtrail snapshot"
    if header[len(_MAGIC):].decode(errors="replace") != fingerprint():
        return None, "the snapshot was written by a version with other state classes"
    try:
        snapshot = pickle.loads(body)  # noqa: S301 - our own bytes, written by dumps()
    except Exception as exc:  # a truncated or foreign pickle: report and rebuild
        return None, f"unreadable snapshot: {type(exc).__name__}: {exc}"
    if not isinstance(snapshot, Snapshot):
        return None, "unexpected snapshot content"
    return snapshot, ""


class SnapshotFile:
    """One snapshot file, replaced atomically (tmp, fsync, rename, fsync dir)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.problem = ""
        """Why the last `load` returned nothing (for the operator), '' when it loaded."""

    def save(self, pipeline: Pipeline, positions: dict[str, int],
             clusters: dict[str, Pipeline] | None = None) -> int:
        """Write the state; returns the size in bytes."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = dumps(pipeline, positions, clusters)
        tmp = self.path.with_suffix(".tmp")
        with tmp.open("wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)
        fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        return len(data)

    def load(self) -> Snapshot | None:
        self.problem = ""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            self.problem = "no snapshot yet"
            return None
        except OSError as exc:
            self.problem = f"cannot read {self.path}: {exc}"
            return None
        snapshot, self.problem = loads(data, str(self.path))
        return snapshot

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)
