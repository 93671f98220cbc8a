"""Bounded memory: incidents leave the detector's memory, indexes drop what is past every
window.

A worker runs for months; the incidents it decided must not all stay in its memory. An
incident that is settled (resolved, closed, withdrawn) and quiet for `Eviction.after`, or
still active but quiet for `Eviction.quiet_after` (event time, against the watermark, so a
replay evicts exactly what the first run evicted), leaves the book, and is folded back from
its log when needed (`archive`). The decisions taken from it are the same, so the incident
log does not depend on the setting.

Two things keep that exact. An incident goes only once nothing can still replay over it:
untouched since the oldest lateness checkpoint (`Lateness.busy`), and holding no failed
attempt of a job the detector still remembers (`correlate` finds those by scanning the
book). And a re-evaluation's replay folds back only what was evicted at its checkpoint,
with the state it had there (`Lateness.recalls`).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta

from processors.incidents.book import Book, millis
from processors.incidents.model import Incident


@dataclass(frozen=True)
class Eviction:
    """When incidents leave memory; None keeps them (the default without an archive)."""

    after: timedelta | None = timedelta(hours=1)
    """Settled (resolved, closed, withdrawn) and quiet this long."""
    quiet_after: timedelta | None = timedelta(hours=24)
    """Still active but with no new decision this long (nobody resolved it)."""
    remember: timedelta = timedelta(days=30)
    """How long an evicted incident's last seq is kept: a replay after a restart folds it
    back as it left, not with what the log gained since."""


def settled(inc: Incident) -> bool:
    return inc.withdrawn or inc.status in ("resolved", "closed")


def evict(book: Book, rule: Eviction, busy: Collection[str]) -> list[str]:
    """Drop from `book` the incidents `rule` lets go; `busy`: incidents a re-evaluation may
    still replay over. Returns the ids evicted."""
    if book.watermark is None:
        return []
    now: datetime = book.watermark
    gone = []
    for inc_id, inc in list(dict.items(book.incidents)):
        limit = rule.after if settled(inc) else rule.quiet_after
        last = book.last_touch.get(inc_id)
        if limit is None or inc_id in busy or (last is not None and now - last < limit):
            continue
        if any((j.project, j.job_id) in book.jobs for j in inc.jobs.values()
               if j.role in ("failed", "degraded")):
            # `correlate` finds who held an earlier failed attempt by scanning the book, a
            # re-evaluation where an attempt went by scanning what it rebuilt
            continue
        gone.append(inc_id)
    for inc_id in gone:
        book.incidents.evicted[inc_id] = (book.incidents[inc_id].seq, now)
        dict.__delitem__(book.incidents, inc_id)
        book.last_touch.pop(inc_id, None)
        book.folded.pop(inc_id, None)
        book.opened_observed.pop(inc_id, None)
    cut = now - rule.remember
    if any(at < cut for _, at in book.incidents.evicted.values()):
        held = _referenced(book)
        book.incidents.evicted = {i: v for i, v in book.incidents.evicted.items()
                                  if v[1] >= cut or i in held}
    return gone


def _referenced(book: Book) -> set[str]:
    """Incidents the detector's indexes still point at (it must be able to fold them
    back however long ago they left)."""
    out = {*book.open.values(), *book.resolved.values(), *book.by_attempt.values()}
    out |= {i for held in book.pending.values() for i, _ in held}
    out |= {ref for _, _, _, ref, _ in book.timers}
    out |= {t.split("/", 1)[0] for seen in book.node_incidents.values() for t in seen}
    out |= {i for held in book.drains.values() for i in held}  # a node's return is theirs
    out |= {inc_id for _, inc_id, _, _ in book.blamed.values()}  # a node blamed for a cause
    return out


def prune(book: Book, horizon: datetime, offender_window: timedelta) -> None:
    """Indexes that only matter inside a window: signal counts past it, resolved keys past
    their reopen window, node failures past the repeat-offender window (`horizon`: the
    watermark less the longest window and the lateness horizon)."""
    since = millis(horizon, up=True)
    for counted in [k for k, w in book.counts.items() if not w or w[-1] < since]:
        del book.counts[counted]
    for key in [k for k, at in book.resolved_at.items() if at < horizon]:
        book.resolved_at.pop(key)
        book.resolved.pop(key, None)
    cut = horizon - offender_window
    for node in list(book.node_incidents):
        seen = {t: at for t, at in book.node_incidents[node].items() if at >= cut}
        if seen:
            book.node_incidents[node] = seen
        else:
            del book.node_incidents[node]
