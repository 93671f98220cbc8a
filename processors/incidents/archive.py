"""Where evicted incidents come back from: the book's `Incidents` mapping folds an incident
the detector no longer holds (`eviction`) back from its log (`Archive.log`, the store's
`incident_log` at the edge) the moment anything asks for it: a command, a postmortem draft,
late evidence, a timer, a reopen. The log is the incident, so what comes back is what left.

Pure: no I/O here; the archive is bound by the runtime and never pickled.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Collection, Sequence
from datetime import datetime
from typing import Any, Protocol

from processors.incidents.model import Incident, IncidentEvent, fold


class Archive(Protocol):
    """Where evicted incidents are read back from (the store, at the edge)."""

    def log(self, incident_id: str) -> Sequence[IncidentEvent]:
        """The incident's events; empty when it is not this archive's."""
        ...

    def on_entities(self, entities: Collection[str]) -> Sequence[str]:
        """Ids of this archive's incidents whose entity or cause entity is one of these
        (a postmortem draft lists the prior incidents on its entity)."""
        ...


Recall = Callable[[str, int | None], Incident | None]
"""(incident, the last seq it had when evicted, if known) -> its state, or None."""


def recall_from(archive: Archive) -> Recall:
    def recall(incident_id: str, upto: int | None) -> Incident | None:
        # a replay after a restart reads a log that may already hold what it is about to
        # decide again: the incident comes back as it was when it left
        events = [e for e in archive.log(incident_id) if upto is None or e.seq <= upto]
        return fold(events).get(incident_id) if events else None
    return recall


class Incidents(dict[str, Incident]):
    """The book's incidents by id: those in memory, and any evicted one folded back on
    `[]`, `get` or `in`. Iterating sees only those in memory."""

    recall: Recall | None = None
    related: Callable[[Collection[str]], Sequence[str]] | None = None
    recalled: list[tuple[str, bytes]]

    def __init__(self, items: Any = (),
                 evicted: dict[str, tuple[int, datetime]] | None = None) -> None:
        super().__init__(items)
        self.recalled = []
        """(id, its state as folded back) since the runtime last looked (`lateness`)."""
        self.evicted: dict[str, tuple[int, datetime]] = evicted or {}
        """id -> (its last seq, the watermark) when it left: it comes back as it was then.
        Kept for `Eviction.remember`."""

    def __reduce__(self) -> Any:
        # the recall callable is the runtime's (a store); a copy holds the incidents only
        return (Incidents, (dict(self), dict(self.evicted)))

    def bound(self, archive: Archive | None) -> Incidents:
        self.recall = recall_from(archive) if archive is not None else None
        self.related = archive.on_entities if archive is not None else None
        return self

    def like(self, other: Incidents) -> Incidents:
        """Bound to what `other` is bound to."""
        self.recall, self.related = other.recall, other.related
        return self

    def knows(self, incident_id: str) -> bool:
        """In memory or evicted (foldable from the log), without folding it back."""
        return dict.__contains__(self, incident_id) or incident_id in self.evicted

    def resident(self) -> set[str]:
        """The ids in memory (`in` would fold an evicted one back)."""
        return set(super().keys())

    def recall_on(self, entities: Collection[str]) -> None:
        """Fold back the evicted incidents on these entities (a postmortem draft lists the
        prior ones)."""
        if self.related is not None and entities:
            for incident_id in self.related(entities):
                self.fetch(incident_id)

    def _back(self, incident_id: str, known: bool = False) -> Incident | None:
        """Fold an evicted incident back. The detector asks only for those it evicted (an id
        the log holds but memory never did is a decision a replay is about to take again);
        `known`: a person's command, for any incident of the log."""
        left = self.evicted.get(incident_id)
        if self.recall is None or (left is None and not known):
            return None
        inc = self.recall(incident_id, left[0] if left else None)
        if inc is not None:
            self.evicted.pop(incident_id, None)
            self.recalled.append((incident_id, pickle.dumps(inc)))
            dict.__setitem__(self, incident_id, inc)
        return inc

    def fetch(self, incident_id: str) -> Incident | None:
        """In memory, or from the log (a command on an incident evicted long ago)."""
        found = dict.get(self, incident_id)
        return found if found is not None else self._back(incident_id, known=True)

    def __missing__(self, incident_id: str) -> Incident:
        inc = self._back(incident_id)
        if inc is None:
            raise KeyError(incident_id)
        return inc

    def get(self, incident_id: str, default: Any = None) -> Any:
        found = dict.get(self, incident_id)
        return found if found is not None else (self._back(incident_id) or default)

    def __contains__(self, incident_id: object) -> bool:
        return dict.__contains__(self, incident_id) or (
            isinstance(incident_id, str) and self._back(incident_id) is not None)


class MemoryArchive:
    """An archive over the log a pipeline emitted (tests, benchmarks): what the store's
    `incident_log` gives a runtime."""

    def __init__(self) -> None:
        self.events: dict[str, list[IncidentEvent]] = {}
        self.reads = 0
        self.hits = 0
        """Reads that found an incident (it had been evicted and was needed)."""

    def add(self, events: Sequence[IncidentEvent]) -> None:
        for e in events:
            self.events.setdefault(e.incident_id, []).append(e)

    def log(self, incident_id: str) -> Sequence[IncidentEvent]:
        self.reads += 1
        found = list(self.events.get(incident_id, ()))
        self.hits += bool(found)
        return found

    def on_entities(self, entities: Collection[str]) -> Sequence[str]:
        return [i for i, inc in fold([e for v in self.events.values() for e in v]).items()
                if {inc.entity, inc.cause_entity} & set(entities)]
