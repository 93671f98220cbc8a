"""The incident detector: canonical events (with their timeline attribution) in, incident
events out. It coordinates the concerns, each a module of its own:

    grouping   signals remembered, grouped by the faulty entity; thresholds; reopen
    cause      symptom vs cause; explanation; job-own classification; late causes
    routing    the owning team and why
    severity   severity from impact, flags
    impact     impacted attempts; loss arithmetic
    recovery   restart, restore, resume, verify; restart deadlines
    slowdown   hangs and fail-slow (the rules' `progress`)
    offenders  repeat-offender nodes

All of them decide from the detector's memory (`book.Book`) and the event in hand and
append through `Book.emit`. Pure: no I/O; both runtimes call it from the shared pipeline in
arrival order; timers run on the watermark (the highest event time seen), so the same input
in the same order gives the same incident log whatever the batching. docs/incidents.md has
the long form.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from processors.attempts import LIFECYCLE_TYPES, JobRecord, evolve
from processors.incidents import cause, grouping, offenders, recovery, routing, severity
from processors.incidents.book import AttemptKey, Book, NotInLog
from processors.incidents.model import Command, Incident, IncidentEvent, incident_id
from processors.incidents.rules import Rules
from processors.timeline import TimelineRow
from processors.topology import Topology
from schemas import incident_events as ev
from schemas.events import Event


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
    def incidents(self) -> dict[str, Incident]:
        """The incidents by id (their current state)."""
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
        self.book.restore(log, jobs, grouping.node_of,
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

    def _observe(self, event: Event, rows: Sequence[TimelineRow]) -> None:
        self._advance(event.time)
        book = self.book
        if event.type in LIFECYCLE_TYPES and event.job_id:
            job, _ = evolve(book.jobs.get((event.project, event.job_id)), event)
            if job is not None:
                book.jobs[(event.project, event.job_id)] = job
        if event.job_id:
            recovery.track(self, event)
        signal = self.rules.signal_rule(event.type, event.attributes, event.message)
        if signal is not None:
            grouping.on_signal(self, event, signal, rows)
        symptom = self.rules.symptom_rule(event.type, event.attributes, event.message)
        if symptom is not None and event.job_id:
            cause.on_symptom(self, event, symptom, self.attempt_key(event), event.time,
                             event.id)

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
        for counted in [c for c in book.symptom_counts if (c[0][0], c[0][1]) in gone]:
            del book.symptom_counts[counted]
        return len(gone)

    def reach(self, rows: Sequence[TimelineRow]) -> None:
        grouping.reach(self, rows)

    # --- shared steps -----------------------------------------------------------------------

    def attempt_key(self, event: Event) -> AttemptKey:
        return grouping.attempt_key_of(self, event)

    def open_incident(self, key: str, klass: str, entity: str, first_id: str,
                      first_at: datetime, rule: str, time: datetime,
                      observed_at: datetime | None = None) -> str:
        """Open, route, rate; and count it against its node for the repeat-offender rule."""
        book = self.book
        inc_id = incident_id(key, first_id)
        book.emit(inc_id, ev.IncidentOpened(
            key=key, klass=klass, entity=entity, title=f"{klass.replace('_', ' ')} on {entity}",
            first_signal_at=first_at, first_event=first_id), time, rule, "opened")
        if inc_id not in book.incidents:
            raise NotInLog(inc_id)
        if observed_at is not None and not book.replaying:
            # when the signal reached us: for the latency metric, not part of the log (the
            # log is a function of the input alone)
            book.opened_observed[inc_id] = observed_at
        book.open[key] = inc_id
        routing.route(self, inc_id, time, rule)
        severity.assess(self, inc_id, time, rule)
        if self.rules.klass(klass).group == "node":
            node = grouping.node_of(entity)
            if node:
                offenders.check(self, node, inc_id, time)
        return inc_id

    def evidence(self, inc_id: str, event: Event, role: str, why: str, rule: str,
                 attempt: AttemptKey | None = None) -> None:
        if event.id in self.book.incidents[inc_id].evidence:
            return  # the same event is never attached twice
        self.book.emit(inc_id, ev.EvidenceAttached(
            event_id=event.id, time=event.time, type=event.type, source=event.source.value,
            entity=event.entity or event.node or "", why=why, role=role, project=event.project,
            job_id=event.job_id or "", attempt=attempt[2] if attempt else event.attempt),
            event.time, rule, event.id)
        drill = event.attributes.get("drill")
        if drill and "drill" not in self.book.incidents[inc_id].flags:
            # a recovery drill's fault (jobtrail drill run): recorded as one, pages nobody,
            # left out of the fleet's reliability figures
            self.book.emit(inc_id, ev.SignalAdded(flag="drill", detail=f"recovery drill "
                                                  f"{drill}"), event.time, rule, "drill")

    # --- timers (event time) --------------------------------------------------------------

    def _advance(self, time: datetime) -> None:
        from processors.incidents import slowdown

        book = self.book
        if book.watermark is not None and time <= book.watermark:
            return
        book.watermark = time
        while book.timers and book.timers[0][0] < time:
            when, _, kind, ref, key = heapq.heappop(book.timers)
            if kind == "hang":
                slowdown.hang(self, when, key)
            elif kind == "restart":
                recovery.deadline(self, when, ref, key)
        grouping.forget(self)

