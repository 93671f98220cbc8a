"""Arrival order is not event order: within a lateness horizon the incidents are a function
of the events' times.

The detector decides in arrival order, at once: an incident opens seconds after its first
signal. When an event arrives behind one the detector already saw (files imported one source
after another, a training log shipped every minute, a backfill), the affected window is
evaluated again: the detector's memory is restored from the last checkpoint before the late
event and every journalled event from there on is replayed in (time, id) order, with the
attribution the pipeline knows now. The replayed memory is the answer; `reconcile`
(`processors/incidents/reconcile.py`) writes the difference to the incident log on the
incidents already opened, as `diagnosis_revised` (cause, class, owner, impacted attempts,
loss), so late evidence revises an incident and never opens a second one for the same
failure: an incident the time-ordered events do not give is merged into the one that now
holds its attempts.

Bounded by the horizon, whatever it is: the journal keeps the events since the newest
checkpoint older than `horizon` behind the watermark; checkpoints are taken every
`horizon / 4` of event time (at most 5 min), or further apart when that would take more than
`MAX_CHECKPOINTS` to span the horizon (a backfill's hours of it). An event
older than that is decided in arrival order, where it arrived (and replayed there again by a
later re-evaluation), by the concerns' own late paths (`cause.late`, late attribution).
Cost: a late event replays the window after its checkpoint; events in order cost nothing.
Pure: no clock, ids derived; the same input in the same order gives the
same log whatever the batching.
"""

from __future__ import annotations

import bisect
import functools
import pickle
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING

from processors.incidents.book import Book
from processors.incidents.checkpoint import Checkpoint, Journal, JournalPickle, Position
from processors.incidents.inert import inert
from processors.incidents.model import Incident, IncidentEvent
from processors.incidents.reconcile import reconcile
from processors.incidents.rename import rename
from processors.timeline import TimelineRow
from schemas.events import Event

if TYPE_CHECKING:
    from processors.incidents.detector import Detector

_STRAGGLER = "\uffff"
EVERY = timedelta(minutes=5)
"""Checkpoint spacing in event time (at most horizon / 4): a late event replays at most
this much before it, plus what arrived after it."""
MAX_CHECKPOINTS = 12
"""Memory bound: the spacing (`Lateness.every`) keeps them within it; past it (only after
the horizon grew, `Pipeline.bind`) the second oldest goes, the oldest still covering the
horizon."""
MAX_JOURNAL = 250_000
"""Events the journal holds beyond its newest checkpoint at most (a checkpoint every fifth
of it, whatever the horizon): a long horizon (a file import's days) covers what arrives
slowly, and a fleet's rate shortens it to this many events (ten minutes of 20k jobs)."""
REPLAY_PER_EVENT = 50
REPLAY_FLOOR = 200_000
"""A replay budget: re-evaluations replay at most `REPLAY_PER_EVENT` events per event
observed, plus `REPLAY_FLOOR`. A file imported after another one spanning the same days
is late in every event, and each would replay the other file's events after it: past the
budget a late event is decided where it arrived (as one older than every checkpoint), so an
import costs at most that many times an in-order one, not the product of the files."""


@functools.lru_cache(maxsize=8)
def _spacing(horizon: timedelta) -> timedelta:
    """`Lateness.every` of a horizon (asked once per event: computed once per horizon)."""
    return max(min(horizon / 4, EVERY), horizon / (MAX_CHECKPOINTS - 2), timedelta(seconds=1))


@dataclass
class Lateness(JournalPickle):
    """The journal and checkpoints one detector is re-evaluated from."""

    horizon: timedelta = timedelta(minutes=10)
    journal: Journal = field(default_factory=list)
    """The events since the oldest checkpoint, as JSON: a parsed event is 2 KB in memory,
    its JSON a sixth of that, and only a replay reads them again."""
    checkpoints: list[Checkpoint] = field(default_factory=list)
    head: Position | None = None
    touched: dict[str, Position] = field(default_factory=dict)
    """incident -> the position of the last event that wrote to it: a re-evaluation
    compares the incidents written after its checkpoint."""
    recalls: dict[str, tuple[Position, bytes]] = field(default_factory=dict)
    """incident -> (where it was last folded back from the log, its state then): a replay
    from a checkpoint before that position starts it from this state (`archive`)."""
    unlisted: dict[str, Position] = field(default_factory=dict)
    """incident -> the last checkpoint a replay took without it (a withdrawn one the
    replay never opened): not evicted while such a checkpoint lasts."""
    reevaluations: int = 0
    revisions: int = 0
    stragglers: int = 0
    observed: int = 0
    replayed: int = 0  # events replayed by re-evaluations (the budget)
    since_checkpoint: int = 0

    @property
    def every(self) -> timedelta:
        """Checkpoint spacing. Those newer than the cutoff are at least this far apart, so
        at most `horizon / every + 1` of them, plus the one that covers the cutoff: within
        `MAX_CHECKPOINTS`, so the oldest is always the one that leaves past the cutoff
        (dropping the second oldest, as a horizon of over 12 spacings made it, kept the
        first checkpoint and every event since it forever)."""
        return _spacing(self.horizon)

    def observe(self, d: Detector, event: Event,
                rows_of: Callable[[Event], Sequence[TimelineRow]],
                raw: bytes | None = None, fast: bool = False) -> list[IncidentEvent]:
        """`raw`: the JSON `event` was decoded from, journalled as it is (else encoded).
        `fast`: an event that can never open, join or revise an incident (`inert`, under
        the detector's rules) only moves the detector's time on, here and in a replay;
        journalled and checkpointed as any other, so both ways decide the same."""
        if not self.checkpoints:
            self.checkpoints.append(Checkpoint.of(None, d.book))
        position = (event.time, event.id)
        self.observed += 1
        if self.head is not None and position <= self.head:
            base = self._base(position)
            if base is not None and not self._affordable(base):
                base = None
            if base is not None:
                out = self._reevaluate(d, base, position, event, rows_of, fast)
                self._after(d)
                return out
            # older than every checkpoint: decided where it arrived, replayed there later
            self.stragglers += 1
            position = (self.head[0], f"{self.head[1]}{_STRAGGLER}{event.id}")
        out = _take(d, event, rows_of, fast)
        self._recalled(d.book, position)
        self.journal.append((position, raw or event.model_dump_json()))
        self.head = position
        self._touch(position, out)
        self._after(d)
        return out

    def _recalled(self, book: Book, position: Position) -> None:
        for inc_id, state in book.incidents.recalled:
            self.recalls[inc_id] = (position, state)
        book.incidents.recalled.clear()

    def recalled_outside(self, book: Book) -> None:
        """Incidents folded back by a command (between events): after the head."""
        if self.head is None:
            book.incidents.recalled.clear()  # the first checkpoint will hold them
            return
        self._recalled(book, (self.head[0], f"{self.head[1]}{_STRAGGLER}"))

    def busy(self) -> set[str]:
        """Incidents a re-evaluation may still replay over: not to be evicted."""
        return set(self.touched) | set(self.recalls) | set(self.unlisted)

    def _touch(self, position: Position, events: list[IncidentEvent]) -> None:
        for e in events:
            if self.touched.get(e.incident_id, position) <= position:
                self.touched[e.incident_id] = position

    def _affordable(self, base: int) -> bool:
        """Within the replay budget (`REPLAY_PER_EVENT`); counts the replay when it is."""
        since = self.checkpoints[base].position
        cost = len(self.journal) - (0 if since is None else bisect.bisect_right(
            self.journal, since, key=lambda j: j[0]))
        if self.replayed + cost > REPLAY_PER_EVENT * self.observed + REPLAY_FLOOR:
            return False
        self.replayed += cost
        return True

    def _base(self, position: Position) -> int | None:
        """The index of the newest checkpoint before `position`."""
        for i in range(len(self.checkpoints) - 1, -1, -1):
            at = self.checkpoints[i].position
            if at is None or at < position:
                return i
        return None

    def _checkpoint(self, d: Detector, position: Position) -> None:
        last = self.checkpoints[-1].position
        self.since_checkpoint += 1
        if last is None or position[0] - last[0] >= self.every \
                or self.since_checkpoint >= MAX_JOURNAL // 5:
            self.checkpoints.append(Checkpoint.of(position, d.book))
            self.since_checkpoint = 0

    def _after(self, d: Detector) -> None:
        """Checkpoint every `every` of event time; forget what is past the horizon."""
        assert self.head is not None
        self._checkpoint(d, self.head)
        cutoff = self.head[0] - self.horizon if d.book.watermark is None else \
            d.book.watermark - self.horizon
        while len(self.checkpoints) > 1 and (at := self.checkpoints[1].position) is not None \
                and (at[0] < cutoff or (len(self.journal) > MAX_JOURNAL and len(
                    self.journal) - bisect.bisect_right(self.journal, at,
                                                        key=lambda j: j[0]) > MAX_JOURNAL)):
            self.checkpoints.pop(0)
        while len(self.checkpoints) > MAX_CHECKPOINTS:
            self.checkpoints.pop(1)
        oldest = self.checkpoints[0].position
        # the journal is in position order: nothing to cut unless its first event is at or
        # before the oldest checkpoint (a bisection per event was 3 µs of it)
        if oldest is not None and self.journal and self.journal[0][0] <= oldest:
            cut = bisect.bisect_right(self.journal, oldest, key=lambda j: j[0])
            # only when the oldest checkpoint moved on (its event was journalled): what is
            # written after it needs no pruning, and pruning thousands of touched incidents
            # at every event was most of a worker's time
            if cut:
                del self.journal[:cut]
                self.touched = {i: at for i, at in self.touched.items() if at > oldest}
                self.recalls = {i: r for i, r in self.recalls.items() if r[0] > oldest}
                self.unlisted = {i: at for i, at in self.unlisted.items() if at >= oldest}

    def _reevaluate(self, d: Detector, base: int, position: Position, event: Event,
                    rows_of: Callable[[Event], Sequence[TimelineRow]],
                    fast: bool = False) -> list[IncidentEvent]:
        self.reevaluations += 1
        bisect.insort(self.journal, (position, event.model_dump_json()), key=lambda j: j[0])
        checkpoint = self.checkpoints[base]
        del self.checkpoints[base + 1:]  # taken before this event: no longer the answer
        since = checkpoint.position
        live = d.book
        touched = {inc for inc, at in self.touched.items() if since is None or at > since}
        replay: list[IncidentEvent] = []
        d.book = checkpoint.restore()
        d.book.incidents.like(live.incidents)
        if live.incidents.recall is not None:
            d.book.incidents.recall = self._as_at(since, touched, live.incidents.resident(),
                                                  live.incidents.recall)
        start = 0 if since is None else bisect.bisect_right(self.journal, since,
                                                            key=lambda j: j[0])
        for at, raw in self.journal[start:]:
            replayed = Event.model_validate_json(raw)
            emitted = _take(d, replayed, rows_of, fast)
            self._recalled(d.book, at)
            replay.extend(emitted)
            self._touch(at, emitted)
            if at > position:  # the next late event replays from closer
                self._held_back(d.book, since, at)
                self._checkpoint(d, at)
        missing = live.incidents.resident() - d.book.incidents.resident()
        out, renamed = reconcile(live, d.book, replay, touched, event)
        if len(self.checkpoints) > base + 1:
            last = self.checkpoints[-1].position
            assert last is not None
            for inc_id in missing:
                self.unlisted[renamed.get(inc_id, inc_id)] = last
        d.book.incidents.like(live.incidents)
        d.book.incidents.recalled.clear()
        for later in self.checkpoints[base + 1:]:  # taken during the replay: renamed too
            if renamed:
                book = later.restore()
                rename(book, renamed)
                redone = Checkpoint.of(later.position, book)
                later.book, later.signals = redone.book, redone.signals
        self._touch(position, out)
        self.revisions += sum(1 for e in out if e.kind == "diagnosis_revised")
        return out


    def _as_at(self, since: Position | None, touched: set[str], resident: set[str],
               recall: Callable[[str, int | None], Incident | None],
               ) -> Callable[[str, int | None], Incident | None]:
        """Folding back for a replay from the checkpoint at `since`: an incident evicted
        then comes back as it was there (its log, or its state when a later recall took it
        back); one written only after it, or held in memory but not in the checkpoint (a
        withdrawn one), does not exist there."""
        def at_checkpoint(inc_id: str, upto: int | None) -> Incident | None:
            kept = self.recalls.get(inc_id)
            if kept is not None and (since is None or kept[0] > since):
                state: Incident = pickle.loads(kept[1])  # noqa: S301 - our own bytes
                return state
            if inc_id in touched or inc_id in resident:
                return None
            return recall(inc_id, upto)
        return at_checkpoint

    def _held_back(self, book: Book, since: Position | None, at: Position) -> None:
        """Before a replay takes a checkpoint: the incidents the live run had folded back by
        then are in memory there too, as they came back."""
        for inc_id, (pos, state) in self.recalls.items():
            if (since is None or pos > since) and pos <= at \
                    and not dict.__contains__(book.incidents, inc_id):
                dict.__setitem__(book.incidents, inc_id, pickle.loads(state))  # noqa: S301


def _take(d: Detector, event: Event, rows_of: Callable[[Event], Sequence[TimelineRow]],
          fast: bool) -> list[IncidentEvent]:
    """The detector observes `event`; on the fast path an inert one only moves its time on
    (`Detector.advance`: the same, without the attribution and the rules' lookups)."""
    if fast and inert(d.rules, event):
        if event.cluster and not d.book.cluster:  # as `_observe`: the cluster decided
            d.book.cluster = event.cluster
        return d.advance(event.time)
    return d.observe(event, rows_of(event))
