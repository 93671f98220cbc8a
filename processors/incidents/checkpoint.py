"""A lateness checkpoint: the detector's memory at one position of the journal, which a
re-evaluation restores and replays the later events over (`lateness`)."""

from __future__ import annotations

import pickle
import zlib
from dataclasses import dataclass
from datetime import datetime

from processors.incidents.book import Book

Position = tuple[datetime, str]


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
