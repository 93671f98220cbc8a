"""The incident detector: canonical events (with their timeline attribution) in, incident
events out. It coordinates the concerns, each a module of its own:

    grouping   signals remembered, grouped by the faulty entity; thresholds; reopen
    cause      symptom vs cause; explanation; job-own classification; late causes
    routing    the owning team and why
    severity   severity from impact, flags
    impact     impacted attempts; loss arithmetic
    recovery   restart, restore, resume, verify; restart deadlines
    slowdown   hangs and fail-slow (the rules' `progress`)
    planned    planned work (changes, maintenance drains) is not a fault
    offenders  repeat-offender nodes

All of them decide from a `context.Context` (the detector's memory, `book.Book`, with the
rules and the topology) and the event in hand, and append through `Book.emit`; none of them
imports this coordinator. Pure: no I/O; both runtimes call it from the shared pipeline in
arrival order; timers run on the watermark (the highest event time seen), so the same input
in the same order gives the same incident log whatever the batching. docs/incidents.md has
the long form.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from processors.attempts import LIFECYCLE_TYPES, JobRecord, evolve
from processors.incidents import (
    blame,
    cause,
    changes,
    continuation,
    ends,
    grouping,
    impact,
    opening,
    planned,
    power,
    reasons,
    recovery,
    slowdown,
)
from processors.incidents.archive import Incidents
from processors.incidents.book import AttemptKey, Book, NotInLog, node_of
from processors.incidents.context import Context
from processors.incidents.model import Command, IncidentEvent
from processors.incidents.rules import Rules
from processors.timeline import TimelineRow
from processors.topology import Topology
from schemas.events import Event

READY_KEPT = 8
"""`node.ready` times remembered per node (a fault is weighed against the latest few)."""


class Detector:
    def __init__(self, rules: Rules, topology: Callable[[], Topology]) -> None:
        self.rules = rules
        self.topology = topology
        self.book = Book()

    # --- state (snapshots, restore) ------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        """Everything but the rules and the topology, which the runtime binds on load."""
        return {"book": self.book}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def bind(self, rules: Rules, topology: Callable[[], Topology]) -> None:
        self.rules = rules
        self.topology = topology

    @property
    def context(self) -> Context:
        """What the concerns decide from: rebuilt when the book (replaced on restore and by
        a lateness re-evaluation), the rules or the topology changed, else the last one
        (it was a new object per event)."""
        ctx: Context | None = self.__dict__.get("_context")
        if ctx is None or ctx.book is not self.book or ctx.rules is not self.rules \
                or ctx.topology is not self.topology:
            ctx = self.__dict__["_context"] = Context(self.book, self.rules, self.topology)
        return ctx

    @property
    def incidents(self) -> Incidents:
        """The incidents by id (their current state; an evicted one is read back)."""
        return self.book.incidents

    @property
    def opened_observed(self) -> dict[str, datetime]:
        return self.book.opened_observed

    @property
    def replaying(self) -> bool:
        return self.book.replaying

    @replaying.setter
    def replaying(self, value: bool) -> None:
        self.book.replaying = value

    def restore(self, log: Sequence[IncidentEvent],
                jobs: Mapping[tuple[str, str], JobRecord] = {}) -> None:
        """Rebuild the incidents and their indexes from the log (no snapshot)."""
        self.book.restore(log, jobs, node_of,
                           lambda klass: self.rules.klass(klass).group == "node")

    def command(self, command: Command) -> list[IncidentEvent]:
        return self.book.command(command)

    # --- entry points ---------------------------------------------------------------------

    def observe(self, event: Event, rows: Sequence[TimelineRow]) -> list[IncidentEvent]:
        book = self.book
        book.out = []
        try:
            self._observe(event, rows)
        except NotInLog:
            if not book.replaying:
                raise
        out, book.out = book.out, []
        return out

    def advance(self, time: datetime) -> list[IncidentEvent]:
        """Event time moves on with no event to observe (one that can never open, join or
        revise an incident: `processors.incidents.inert`): the timers due before `time`
        fire, as they would have at that event."""
        book = self.book
        book.out = []
        try:
            self._advance(self.context, time)
        except NotInLog:
            if not book.replaying:
                raise
        out, book.out = book.out, []
        return out

    def _observe(self, event: Event, rows: Sequence[TimelineRow]) -> None:
        ctx = self.context
        self._advance(ctx, event.time)
        event = reasons.named_xid(event, ctx.topology().gpu_of)
        if event.cluster and not self.book.cluster:
            self.book.cluster = event.cluster
        book = self.book
        if event.type in LIFECYCLE_TYPES and event.job_id:
            job, touched = evolve(book.jobs.get((event.project, event.job_id)), event)
            if job is not None:
                book.jobs[(event.project, event.job_id)] = job
            for number in touched:  # a better source of an impacted attempt's GPUs
                impact.revise_gpus(ctx, (event.project, event.job_id, number), event.time)
        if event.job_id:
            recovery.track(ctx, event)
        if event.type == "node.ready" and (node := event.node or node_of(event.entity or "")):
            book.ready.setdefault(node, deque(maxlen=READY_KEPT)).append(event.time)
            for inc_id in sorted(book.drains.pop(node, ())):
                if book.incidents.knows(inc_id) and book.incidents[inc_id].active:
                    book.evidence(inc_id, event, "recovery", f"{node} returned to service",
                                  "node-returned")
        signal = power.observe(ctx, event, planned.observe(ctx, event, self.rules.signal_rule(
            event.type, event.attributes, event.message)))
        if signal is not None and event.project and not event.job_id and not rows:
            signal = None  # a project's report of a place none of its jobs is on (the rows
            # are its own project's only: `timeline.rows_for`): no incident of its own
        if signal is not None:
            grouping.on_signal(ctx, event, signal, rows)
        elif event.attributes.get("ends"):
            ends.on_end(ctx, event)
        symptom = self.rules.symptom_rule(event.type, event.attributes, event.message)
        if symptom is not None and event.job_id:
            cause.on_symptom(ctx, event, symptom, book.attempt_key(event), event.time,
                             event.id)
        elif symptom is not None and symptom.via_node:
            # a node's report of a process it killed: the symptom of the one attempt on it
            on = {(r.project, r.job_id, r.attempt) for r in rows if r.relation == "node"}
            if len(on) == 1:
                cause.on_symptom(ctx, event, symptom, on.pop(), event.time, event.id)

    def forget_jobs(self, cutoff: datetime) -> int:
        """Drop what the book holds for jobs whose attempts all ended before `cutoff` (their
        records, progress, recoveries still pending, incident holds and symptom counts), and
        progress of attempts no lifecycle event ever described that went quiet before it."""
        book = self.book
        gone = {k for k, job in book.jobs.items() if job.ended_before(cutoff)}
        for key in gone:
            del book.jobs[key]
            book.pending.pop(key, None)

        def stale(a: AttemptKey) -> bool:
            if (a[0], a[1]) in gone:
                return True
            if (a[0], a[1]) in book.jobs:
                return False
            p = book.progress.get(a)
            last = max((t for t in (p.last_step_at, p.ckpt_at) if t is not None),
                       default=None) if p is not None else None
            return last is None or last < cutoff

        for attempt in [a for a in book.progress if stale(a)]:
            del book.progress[attempt]
        for attempt in [a for a in book.by_attempt if (a[0], a[1]) in gone]:
            del book.by_attempt[attempt]
        continuation.forget(book, gone)
        for counted in [c for c in book.symptom_counts if (c[0][0], c[0][1]) in gone]:
            del book.symptom_counts[counted]
        return len(gone)

    def reach(self, rows: Sequence[TimelineRow]) -> None:
        grouping.reach(self.context, rows)

    # --- shared steps, kept for callers of the coordinator ---------------------------------

    def attempt_key(self, event: Event) -> AttemptKey:
        return self.book.attempt_key(event)

    def open_incident(self, key: str, klass: str, entity: str, first_id: str,
                      first_at: datetime, rule: str, time: datetime,
                      observed_at: datetime | None = None) -> str:
        return opening.open_incident(self.context, key, klass, entity, first_id, first_at,
                                     rule, time, observed_at)

    # --- timers (event time) --------------------------------------------------------------

    def _advance(self, ctx: Context, time: datetime) -> None:
        book = self.book
        if book.watermark is not None and time <= book.watermark:
            return
        book.watermark = time
        while book.timers and book.timers[0][0] < time:
            when, _, kind, ref, key = heapq.heappop(book.timers)
            if kind == "hang":
                slowdown.hang(ctx, when, key)
            elif kind == "restart":
                recovery.deadline(ctx, when, ref, key)
        grouping.forget(ctx)
        planned.forget(ctx)
        power.forget(ctx)
        changes.forget(ctx)
        blame.forget(ctx)

