"""A job resubmitted under a new job id that restores an earlier job's checkpoint is that
job's continuation (docs/incidents.md, "Recovery").

A checkpoint save records its path (`checkpoint.saved` with a `path` attribute) under the
checkpoint's root: the path without the per-step directory frameworks write under it
(`global_step500/`, `checkpoint-500/`, `iter_0000500/`), so a save of
`/ckpt/run/global_step500` and a load from `/ckpt/run` at iteration 500 name the same
checkpoint. A later job of the SAME project whose restore names a root an earlier job saved
continues that job: the earlier job's failed attempts waiting for recovery follow the new
job's attempt (its start, its restore, its first step, the step that passes the failure), and
their GPU line runs on through the new job's attempts (`impact.runs`), exactly as a requeued
next attempt of the same job is followed. A job restoring its own checkpoint is its own next
attempt (nothing to link); a path of the same name in another project is never looked up.

State lives in the book (`Book.saved_paths`, `Book.continued`), so it is checkpointed with
it; `Detector.forget_jobs` drops what names a forgotten job. Pure: no clock, no I/O.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from processors.incidents.book import AttemptKey, Book
    from schemas.events import Event

JobKey = tuple[str, str]

_STEP_DIR = re.compile(r"(?:global_step|checkpoint-|checkpoint_|iter_|step[-_=]?)\d+(?:\.\w+)?",
                       re.I)
MAX_CHAIN = 16
"""The longest chain of resubmissions followed (bounds every walk of `continued`)."""


def root(path: str) -> str:
    """The checkpoint's root: `path` up to (not including) its first per-step component."""
    parts = path.strip().rstrip("/").split("/")
    for i, part in enumerate(parts):
        if i > 0 and _STEP_DIR.fullmatch(part):
            return "/".join(parts[:i]) or "/"
    return "/".join(parts)


_ANCHORED = re.compile(r"^(?:/|[a-z][a-z0-9+.-]*://)", re.I)
"""An absolute path or a URL (`s3://bucket/run`): a relative one (`./outputs/checkpoint-500`)
is relative to each job's own directory, so two jobs naming it need not share it."""


def path_of(event: Event) -> str:
    """The checkpoint root the event names ('' when it names none, or only a relative
    path, which cannot link two jobs)."""
    path = event.attributes.get("path")
    if not isinstance(path, str) or not _ANCHORED.match(path.strip()):
        return ""
    return root(path)


def saved(book: Book, event: Event, key: AttemptKey) -> None:
    """A save finished: its root is this attempt's (the latest saver wins)."""
    where = path_of(event)
    if where and key[1]:
        book.saved_paths[(key[0], where)] = (key[1], key[2])


def link(book: Book, event: Event, key: AttemptKey) -> JobKey | None:
    """A restore by `key` names a root an earlier job of its project saved: the new job
    continues that one. Returns the job continued when this restore made the link."""
    where = path_of(event)
    found = book.saved_paths.get((key[0], where)) if where and key[1] else None
    if found is None or found[0] == key[1]:
        return None
    new, old = (key[0], key[1]), (key[0], found[0])
    later = [j for j in descendants(book, old) if j != new]
    if later:  # the saver was resubmitted already: the new job continues the latest one
        old = later[-1]
    if new in book.continued or new == old or new in ancestors(book, old):
        return None  # linked already (its first restore), or a cycle
    book.continued[new] = old
    return old


def ancestors(book: Book, job: JobKey) -> list[JobKey]:
    """The jobs `job` continues, the nearest first."""
    out: list[JobKey] = []
    at = book.continued.get(job)
    while at is not None and at not in out and at != job and len(out) < MAX_CHAIN:
        out.append(at)
        at = book.continued.get(at)
    return out


def descendants(book: Book, job: JobKey) -> list[JobKey]:
    """The jobs that continue `job`, in the order they continue it (each one's own
    continuations after it)."""
    out: list[JobKey] = []
    frontier = [job]
    while frontier and len(out) < MAX_CHAIN:
        at = frontier.pop(0)
        for new, old in book.continued.items():
            if old == at and new not in out and new != job:
                out.append(new)
                frontier.append(new)
    return out[:MAX_CHAIN]


def forget(book: Book, gone: set[JobKey]) -> None:
    """Drop what names a job the detector forgot."""
    for where in [w for w, (job, _) in book.saved_paths.items() if (w[0], job) in gone]:
        del book.saved_paths[where]
    for new in [n for n, o in book.continued.items() if n in gone or o in gone]:
        del book.continued[new]
