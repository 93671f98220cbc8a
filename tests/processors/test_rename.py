"""`rename`: when a replay opened an incident the log holds under another id, every part of
the detector's memory that names the incident takes the log's id (a part left with the
replay's id points at no incident: the next decision through it raised KeyError)."""

from __future__ import annotations

from datetime import UTC, datetime

from processors.incidents.book import Book
from processors.incidents.rename import rename

T = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)


def test_every_map_that_names_an_incident_is_renamed() -> None:
    book = Book()
    book.open = {"node:n1": "old"}
    book.resolved = {"node:n2": "old"}
    book.by_attempt = {("p", "j", 1): "old"}
    book.blamed = {"n1": (None, "old", T, ("p/j/1",))}  # type: ignore[dict-item]
    book.drains = {"n1": {"old", "other"}}
    book.last_touch = {"old": T}
    book.opened_observed = {"old": T}
    book.folded = {"old": 2}
    rename(book, {"old": "new"})
    assert book.open == {"node:n1": "new"} and book.resolved == {"node:n2": "new"}
    assert book.by_attempt == {("p", "j", 1): "new"}
    assert book.blamed["n1"][1:] == ("new", T, ("p/j/1",))
    assert book.drains == {"n1": {"new", "other"}}
    assert book.last_touch == {"new": T} and book.opened_observed == {"new": T}
    assert book.folded == {"new": 2}
