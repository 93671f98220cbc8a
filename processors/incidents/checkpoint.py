"""A lateness checkpoint: the detector's memory at one position of the journal, which a
re-evaluation restores and replays the later events over (`lateness`)."""

from __future__ import annotations

import pickle
import zlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from processors.incidents.book import Book, from_millis, millis

Position = tuple[datetime, str]
Journal = list[tuple[Position, str | bytes]]


def pack_journal(journal: Journal) -> tuple[list[int], list[str], list[str | bytes]]:
    """The journal as columns, its times in milliseconds: a snapshot holds the horizon's
    events (35k in `bench.e2e`'s 200k), and a datetime each pickled in about a µs was most
    of the snapshot's time."""
    return ([millis(at) for (at, _), _ in journal], [i for (_, i), _ in journal],
            [j for _, j in journal])


def unpack_journal(packed: tuple[list[int], list[str], list[str | bytes]]) -> Journal:
    times, ids, payloads = packed
    return [((from_millis(t), i), j)
            for t, i, j in zip(times, ids, payloads, strict=True)]


class JournalPickle:
    """Pickles its `journal` as `pack_journal`'s columns (`Lateness`)."""

    journal: Journal

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "journal": pack_journal(self.journal)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update({**state, "journal": unpack_journal(state["journal"])})


@dataclass
class Checkpoint:
    position: Position | None  # the last event folded into `book` (None: the beginning)
    book: bytes
    """The detector's memory, pickled and compressed: with 20k attempts and an hour of
    signals a pickled book is tens of MB, a sixth of it compressed."""
    signals: list[tuple[bytes, bytes]]
    """The signals, packed: the bytes the live signals hold, by reference (a pointer each),
    not pickled and compressed again at every checkpoint (`Book.pack`)."""

    @classmethod
    def of(cls, position: Position | None, book: Book) -> Checkpoint:
        state, signals = book.pack()
        return cls(position, zlib.compress(pickle.dumps(state), 1), signals)

    def restore(self) -> Book:
        state = pickle.loads(zlib.decompress(self.book))  # noqa: S301 - our own bytes
        return Book.unpack(state, self.signals)
