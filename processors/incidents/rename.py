"""Renaming incidents in the detector's memory: a re-evaluation's replay opened an incident
the log already holds under another id (`lateness`), so every index that names it, and every
repeat-offender token (`incident` or `incident/attempt`), takes the log's id."""

from __future__ import annotations

from collections.abc import Callable

from processors.incidents.archive import Incidents
from processors.incidents.book import Book, Progress


def rename(book: Book, names: dict[str, str]) -> None:
    """Incident ids in the detector's memory, `old -> new` (the replay opened an incident
    the log already holds under another id)."""
    if not names:
        return

    def n(inc_id: str) -> str:
        return names.get(inc_id, inc_id)

    for old in names.keys() & book.incidents.keys():
        book.incidents[old].id = names[old]
    book.incidents = Incidents({n(k): v for k, v in book.incidents.items()},
                               book.incidents.evicted).like(book.incidents)
    book.open = {k: n(v) for k, v in book.open.items()}
    book.resolved = {k: n(v) for k, v in book.resolved.items()}
    book.by_attempt = {k: n(v) for k, v in book.by_attempt.items()}
    book.pending = {k: [(n(i), a) for i, a in v] for k, v in book.pending.items()}
    book.timers = [(w, s, kind, n(ref), a) for w, s, kind, ref, a in book.timers]
    book.node_incidents = {node: {_token(n, i): t for i, t in v.items()}
                           for node, v in book.node_incidents.items()}
    book.folded = {n(k): v for k, v in book.folded.items()}
    book.blamed = {node: (signal, n(inc), at, attempts)
                   for node, (signal, inc, at, attempts) in book.blamed.items()}
    book.drains = {node: {n(i) for i in held} for node, held in book.drains.items()}
    book.last_touch = {n(k): v for k, v in book.last_touch.items()}
    book.opened_observed = {n(k): v for k, v in book.opened_observed.items()}
    for progress in book.progress.values():
        _rename_progress(progress, n)


def _token(n: Callable[[str], str], token: str) -> str:
    """A repeat-offender token (`incident` or `incident/attempt`) with its incident renamed."""
    inc_id, sep, attempt = token.partition("/")
    return n(inc_id) + sep + attempt


def _rename_progress(progress: Progress, n: Callable[[str], str]) -> None:
    if progress.failed_ckpt is not None:
        progress.failed_ckpt = (progress.failed_ckpt[0], n(progress.failed_ckpt[1]))
    progress.slow_incident = n(progress.slow_incident)
    progress.straggler = {node: (since, n(inc), samples)
                          for node, (since, inc, samples) in progress.straggler.items()}
