"""The incident detector: canonical events (with their timeline attribution) in, incident
events out. Pure: no I/O; both runtimes call it from the shared pipeline in arrival order,
and every decision depends only on the events seen so far and their event times (timers
run on the watermark, the highest event time seen), so the same input in the same order
gives the same incident log whatever the batching.

How it decides (docs/incidents.md has the long form):
- An infrastructure *signal* (rules `signals`) is remembered with the attempts whose fault
  domain it reached (its timeline rows: the job's nodes, their GPUs/NICs, their switches,
  their filesystems). Reaching the rule's threshold opens an incident keyed by the faulty
  entity (`node:node-041`, `network:leaf-07`, `storage:lustre-scratch`); a later signal on
  the same key within `group_window_s` joins it.
- A job *symptom* (rules `symptoms`) looks back `cause_window_s` for the earliest signal
  that reached this attempt: found, the symptom joins (or opens) that entity's incident, the
  attempt is impacted, and the cause is explained; not found, the attempt gets an incident
  of its own classified from its own evidence (the highest-ranked symptom wins). Every later
  symptom of the same attempt joins the same incident (64 ranks timing out: one incident).
- Progress (steps, checkpoints, restores, new attempts) drives recovery and the loss
  arithmetic; hangs and fail-slow are symptoms raised by watermark timers.
"""

from __future__ import annotations

import heapq
import statistics
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from processors.attempts import LIFECYCLE_TYPES, Attempt, JobRecord, evolve
from processors.incidents.model import (
    Actor,
    Command,
    Incident,
    IncidentEvent,
    InvalidTransition,
    apply,
    event_id,
    fold,
    incident_id,
    new_event,
)
from processors.incidents.rules import Rules, SignalRule, SymptomRule
from processors.timeline import TimelineRow, event_node, event_switch
from processors.topology import Topology
from schemas.events import Event

AttemptKey = tuple[str, str, int]
_ORDER = ("sev4", "sev3", "sev2", "sev1")
_CONFIDENCE = {"self": 0.9, "node": 0.9, "gpu": 0.9, "nic": 0.85, "rank": 0.85, "switch": 0.6,
               "target": 0.6, "filesystem": 0.6, "path": 0.6, "queue": 0.5, "change": 0.4}
_RELATION_PHRASE = {"node": "is that node", "gpu": "holds that GPU",
                    "nic": "is cabled to it", "switch": "sits under that switch",
                    "target": "mounts the filesystem it serves", "filesystem": "mounts it",
                    "rank": "runs that rank"}
_NODE_CLASSES = ("gpu_hardware", "nvlink", "node_failure")


def _akey(key: AttemptKey) -> str:
    return f"{key[0]}/{key[1]}/{key[2]}"


def _job(key: AttemptKey) -> dict[str, Any]:
    return {"project": key[0], "job_id": key[1], "attempt": key[2]}


class _NotInLog(Exception):
    """Replaying recent events after a restart reached a decision the log does not hold
    (the original run, seeing another order, did not take it): the decision is skipped."""


@dataclass
class Signal:
    event: Event
    rule: SignalRule
    key: str
    reached: dict[AttemptKey, tuple[str, str]]  # attempt -> (relation, link path)


@dataclass
class Progress:
    last_step: int | None = None
    last_step_at: datetime | None = None
    last_step_event: str = ""
    ckpt_step: int | None = None
    ckpt_at: datetime | None = None
    failed_ckpt: tuple[datetime, str] | None = None  # (time, checkpoint incident)
    step_times: list[float] = field(default_factory=list)
    slow_since: datetime | None = None
    slow_reported: bool = False
    hang_armed: bool = False


class Detector:
    def __init__(self, rules: Rules, topology: Callable[[], Topology]) -> None:
        self.rules = rules
        # the detector folds attempts itself, in arrival order, so that what it knows about
        # an attempt at each event does not depend on how the input was batched
        self.jobs: dict[tuple[str, str], JobRecord] = {}
        self.topology = topology
        self.book: dict[str, Incident] = {}
        self.watermark: datetime | None = None
        self.replaying = False
        self._open: dict[str, str] = {}  # grouping key -> active incident
        self._resolved: dict[str, str] = {}  # grouping key -> last resolved incident
        self._by_attempt: dict[AttemptKey, str] = {}
        self._signals: deque[Signal] = deque()
        self._counts: dict[tuple[str, str], deque[datetime]] = {}
        self._progress: dict[AttemptKey, Progress] = {}
        self._pending: dict[tuple[str, str], list[tuple[str, AttemptKey]]] = {}
        self._timers: list[tuple[datetime, int, str, str, AttemptKey]] = []
        self._timer_seq = 0
        self._node_incidents: dict[str, dict[str, datetime]] = {}
        self._out: list[IncidentEvent] = []
        self.refused = 0
        self._hang_after = timedelta(seconds=rules.progress.hang_after_s)
        self.opened_observed: dict[str, datetime] = {}
        self._symptom_counts: dict[tuple[AttemptKey, str], int] = {}

    # --- state --------------------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        """Everything but the rules and the topology, which the runtime binds on load."""
        state = dict(self.__dict__)
        state.pop("rules", None)
        state.pop("topology", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def bind(self, rules: Rules, topology: Callable[[], Topology]) -> None:
        self.rules = rules
        self.topology = topology
        self._hang_after = timedelta(seconds=rules.progress.hang_after_s)

    def restore(self, log: Sequence[IncidentEvent],
                jobs: Mapping[tuple[str, str], JobRecord] = {}) -> None:
        """Rebuild the book and its indexes from the incident log (and the known attempts)."""
        self.jobs.update(jobs)
        self.book = fold(list(log))
        for inc in self.book.values():
            if inc.active and inc.key:
                self._open[inc.key] = inc.id
            elif inc.key:
                self._resolved[inc.key] = inc.id
            for impact in inc.jobs.values():
                key = (impact.project, impact.job_id, impact.attempt)
                if inc.active and inc.klass != "checkpoint":
                    self._by_attempt[key] = inc.id
                if impact.verified_at is None and inc.active:
                    self._pending.setdefault((impact.project, impact.job_id), []).append(
                        (inc.id, key))
            node = self._node_of_entity(inc.cause_entity) if inc.cause_class in _NODE_CLASSES \
                else ""
            if node and inc.opened_at:
                self._node_incidents.setdefault(node, {})[inc.id] = inc.opened_at

    def _emit(self, inc_id: str, kind: str, time: datetime, actor: Actor,
              data: dict[str, Any], discriminator: str) -> bool:
        """Append one event unless this decision was already taken (same id)."""
        state = self.book.get(inc_id)
        if state is not None and event_id(inc_id, kind, discriminator) in state.applied:
            return False
        if self.replaying:
            return False
        try:
            event = new_event(state, inc_id, kind, time, actor, data, discriminator)
        except InvalidTransition:
            self.refused += 1  # a processor decision the state refuses is counted, not raised
            return False
        self._record(event)
        return True

    def _record(self, event: IncidentEvent) -> None:
        inc = apply(self.book.get(event.incident_id), event)
        self.book[inc.id] = inc
        self._out.append(event)
        if inc.key and event.kind in ("resolved", "closed"):
            if self._open.get(inc.key) == inc.id:
                self._open.pop(inc.key)
            self._resolved[inc.key] = inc.id
            for key, held in list(self._by_attempt.items()):
                if held == inc.id:
                    del self._by_attempt[key]
        elif inc.key and event.kind == "reopened":
            self._open[inc.key] = inc.id

    def command(self, command: Command) -> list[IncidentEvent]:
        """A person's or team's request (ack, assign, resolve, ...): validated, then logged.

        Raises InvalidTransition (with the reason) when the incident's state refuses it; a
        command id seen before returns [] (commands are idempotent)."""
        state = self.book.get(command.incident_id)
        if state is not None and command.command_id in state.commands:
            return []
        kind, data = command.event()
        event = new_event(state, command.incident_id, kind, command.time, command.actor, data,
                          command.command_id, command.command_id)
        self._out = []
        self._record(event)
        out, self._out = self._out, []
        return out

    @staticmethod
    def _actor(rule: str) -> Actor:
        return Actor(kind="processor", name="detector", rule=rule)

    def _attempt(self, key: AttemptKey) -> Attempt | None:
        job = self.jobs.get((key[0], key[1]))
        return job.attempts.get(key[2]) if job else None

    # --- entry point --------------------------------------------------------------------

    def observe(self, event: Event, rows: Sequence[TimelineRow]) -> list[IncidentEvent]:
        self._out = []
        try:
            self._observe(event, rows)
        except _NotInLog:
            if not self.replaying:
                raise
        out, self._out = self._out, []
        return out

    def _observe(self, event: Event, rows: Sequence[TimelineRow]) -> None:
        self._advance(event.time)
        if event.type in LIFECYCLE_TYPES and event.job_id:
            job, _ = evolve(self.jobs.get((event.project, event.job_id)), event)
            if job is not None:
                self.jobs[(event.project, event.job_id)] = job
        if event.job_id:
            self._track_progress(event)
        signal = self.rules.signal_rule(event.type, event.attributes, event.message)
        if signal is not None:
            self._signal(event, signal, rows)
        symptom = self.rules.symptom_rule(event.type, event.attributes, event.message)
        if symptom is not None and event.job_id:
            self._symptom(event, symptom, self._attempt_key(event), event.time, event.id)

    def reach(self, rows: Sequence[TimelineRow]) -> None:
        """Late attribution (an attempt that started after the signal arrived) widens the
        fault domains the remembered signals reached."""
        by_id = {s.event.id: s for s in self._signals}
        for row in rows:
            signal = by_id.get(row.event.id)
            if signal is not None and row.relation != "self":
                signal.reached.setdefault((row.project, row.job_id, row.attempt),
                                          (row.relation, row.link_path))

    def _attempt_key(self, event: Event) -> AttemptKey:
        number = event.attempt
        if number is None:
            job = self.jobs.get((event.project, event.job_id or ""))
            number = (job.attempt_at(event.time) if job else None) or 1
        return (event.project, event.job_id or "", number)

    # --- signals ------------------------------------------------------------------------

    def _node_of_entity(self, entity: str) -> str:
        return entity.split("/", 1)[0] if entity else ""

    def _group_key(self, event: Event, rule: SignalRule) -> str:
        if rule.klass in _NODE_CLASSES:
            return f"node:{event_node(event) or self._node_of_entity(event.entity or '')}"
        if rule.klass == "network":
            switch, _ = event_switch(event)
            return f"network:{switch or event_node(event) or event.entity}"
        if rule.klass.startswith("storage"):
            from processors.timeline import event_filesystem

            fs = event_filesystem(event, self.topology())
            return f"storage:{fs or event.entity or event.attributes.get('target', '')}"
        if event.job_id:
            return f"{rule.klass}:{_akey(self._attempt_key(event))}"
        return f"{rule.klass}:{event.entity or event.node}"

    def _signal(self, event: Event, rule: SignalRule, rows: Sequence[TimelineRow]) -> None:
        reached = {(r.project, r.job_id, r.attempt): (r.relation, r.link_path) for r in rows
                   if r.relation != "self"}
        if event.job_id:
            reached[self._attempt_key(event)] = ("self", event.job_id)
        key = self._group_key(event, rule)
        signal = Signal(event, rule, key, reached)
        self._signals.append(signal)
        window = self._counts.setdefault((rule.name, key), deque())
        window.append(event.time)
        horizon = event.time - timedelta(seconds=rule.threshold.window_s)
        while window and window[0] < horizon:
            window.popleft()
        open_id = self._open.get(key)
        if open_id is not None:
            inc = self.book[open_id]
            if inc.last_signal_at and event.time - inc.last_signal_at > timedelta(
                    seconds=self.rules.group_window_s):
                self._open.pop(key, None)
                open_id = None
        if open_id is None and key in self._resolved:
            old = self.book[self._resolved[key]]
            if old.status == "resolved" and old.resolved_at and event.time - old.resolved_at <= \
                    timedelta(seconds=self.rules.group_window_s):
                self._emit(old.id, "reopened", event.time, self._actor(rule.name),
                           {"why": f"{rule.klass} signal on {key} again after resolution",
                            "event_id": event.id}, event.id)
                self._open[key] = old.id
                self._resolved.pop(key, None)
                open_id = old.id
        if open_id is not None:
            self._join(open_id, signal)
            self._self_impact(open_id, event, rule)
        elif len(window) >= rule.threshold.count:
            recent = [s for s in self._signals if s.key == key and s.rule.name == rule.name
                      and s.event.time >= horizon]
            first = recent[0].event
            inc_id = self._open_incident(key, rule.klass, event.entity or key, first.id,
                                         first.time, rule.name, event.time, event.observed_at)
            count = (f"{len(recent)} signals within {rule.threshold.window_s:.0f} s"
                     if len(recent) > 1 else "one signal")
            self._emit(inc_id, "cause_updated", event.time, self._actor(rule.name),
                       {"class": rule.klass, "entity": first.entity or key,
                        "event_id": first.id, "confidence": 0.7,
                        "explanation": f"{first.entity or key} reported {first.type} "
                                       f"({rule.why or rule.klass}): {count}, rule {rule.name}. "
                                       "No job symptom linked yet.", "source": "signal"},
                       f"cause:{first.id}")
            for s in recent:
                self._join(inc_id, s)
            self._self_impact(inc_id, event, rule)
        self._late_cause(signal)

    def _self_impact(self, inc_id: str, event: Event, rule: SignalRule) -> None:
        """A job-scoped signal (a preemption) impacts its own attempt."""
        if event.job_id:
            key = self._attempt_key(event)
            self._evidence(inc_id, event, "cause", rule.why, rule.name, key)
            self._impacted(inc_id, key, event.time, rule.name, failed=True)

    def _join(self, inc_id: str, signal: Signal) -> None:
        event, rule = signal.event, signal.rule
        inc = self.book[inc_id]
        repeat = bool(inc.jobs) and any(j.restarted_attempt is not None
                                        for j in inc.jobs.values())
        data: dict[str, Any] = {"event_id": event.id, "rule": rule.name}
        if repeat:
            data["flag"] = "repeat"
        self._emit(inc_id, "signal_added", event.time, self._actor(rule.name), data, event.id)
        self._evidence(inc_id, event, "signal", rule.why or rule.klass, rule.name)
        if repeat:
            self._severity(inc_id, event.time, rule.name)

    def _evidence(self, inc_id: str, event: Event, role: str, why: str, rule: str,
                  attempt: AttemptKey | None = None) -> None:
        data = {"event_id": event.id, "time": event.time.isoformat(), "type": event.type,
                "source": event.source.value, "entity": event.entity or event.node or "",
                "why": why, "role": role, "project": event.project,
                "job_id": event.job_id or "", "attempt": attempt[2] if attempt else event.attempt}
        if event.id in self.book[inc_id].evidence:
            return  # the same event is never attached twice
        self._emit(inc_id, "evidence_attached", event.time, self._actor(rule), data, event.id)

    def _open_incident(self, key: str, klass: str, entity: str, first_id: str,
                       first_at: datetime, rule: str, time: datetime,
                       observed_at: datetime | None = None) -> str:
        inc_id = incident_id(key, first_id)
        title = f"{klass.replace('_', ' ')} on {entity}"
        self._emit(inc_id, "opened", time, self._actor(rule),
                   {"key": key, "class": klass, "entity": entity, "title": title,
                    "first_signal_at": first_at.isoformat(), "first_event": first_id},
                   "opened")
        if inc_id not in self.book:
            raise _NotInLog(inc_id)
        if observed_at is not None and not self.replaying:
            # when the signal reached us: for the latency metric, not part of the log (the
            # log is a function of the input alone)
            self.opened_observed[inc_id] = observed_at
        self._open[key] = inc_id
        self._route(inc_id, time, rule)
        self._severity(inc_id, time, rule)
        node = self._node_of_entity(entity) if klass in _NODE_CLASSES else ""
        if node:
            self._repeat_offender(node, inc_id, time, rule)
        return inc_id

    def _late_cause(self, signal: Signal) -> None:
        """A signal that arrives after the symptoms it explains updates their incident."""
        limit = timedelta(seconds=self.rules.cause_window_s)
        for key, (relation, path) in signal.reached.items():
            inc_id = self._by_attempt.get(key)
            if inc_id is None:
                continue
            inc = self.book[inc_id]
            if not inc.active or inc.cause_source != "job" or not inc.key.startswith("job:"):
                continue
            first = inc.first_signal_at
            if first is None or not (signal.event.time <= first <= signal.event.time + limit):
                continue
            self._explain(inc_id, signal, key, first, "the first symptom", relation, path)

    # --- symptoms -----------------------------------------------------------------------

    def _find_cause(self, key: AttemptKey, time: datetime,
                    since: datetime | None = None) -> tuple[Signal, str, str] | None:
        lo = since or time - timedelta(seconds=self.rules.cause_window_s)
        hi = time + timedelta(seconds=self.rules.cause_slack_s)
        best: tuple[Signal, str, str] | None = None
        for signal in self._signals:
            if signal.event.time < lo or signal.event.time > hi or key not in signal.reached:
                continue
            relation, path = signal.reached[key]
            if best is None or (signal.event.time, -_CONFIDENCE.get(relation, 0.5)) < (
                    best[0].event.time, -_CONFIDENCE.get(best[1], 0.5)):
                best = (signal, relation, path)
        return best

    def _symptom(self, event: Event | None, rule: SymptomRule, key: AttemptKey,
                 time: datetime, discriminator: str, since: datetime | None = None) -> None:
        checkpoint = rule.klass == "checkpoint"
        current = self._by_attempt.get(key)
        if current is not None and not checkpoint and self.book[current].active:
            if event is not None and self._room(key, event.type):
                self._evidence(current, event, "symptom", rule.why, rule.name, key)
            self._reclassify(current, rule, time, key)
            return
        found = self._find_cause(key, time, since)
        if found is not None:
            signal, relation, path = found
            inc_id = self._open.get(signal.key)
            if inc_id is None:
                inc_id = self._open_incident(signal.key, signal.rule.klass,
                                             signal.event.entity or signal.key, signal.event.id,
                                             signal.event.time, signal.rule.name, time,
                                             event.observed_at if event else None)
                for s in self._signals:
                    if s.key == signal.key and s.event.time <= time and \
                            s.event.time >= signal.event.time:
                        self._join(inc_id, s)
            self._evidence(inc_id, signal.event, "cause", signal.rule.why, signal.rule.name)
            if self.book[inc_id].cause_source in ("", "signal"):
                what = f"first {event.type}" if event else rule.why
                self._explain(inc_id, signal, key, time, what, relation, path, symptom=event)
        else:
            inc_id = self._open_incident(f"job:{_akey(key)}", rule.klass, _akey(key),
                                         discriminator, time, rule.name, time,
                                         event.observed_at if event else None)
            self._own_cause(inc_id, rule, key, time)
        if event is not None and self._room(key, event.type):
            self._evidence(inc_id, event, "symptom", rule.why, rule.name, key)
        if checkpoint:
            progress = self._progress.setdefault(key, Progress())
            progress.failed_ckpt = (time, inc_id)
        # a failed checkpoint or a slow-down degrades the attempt; anything else ended it
        self._impacted(inc_id, key, time, rule.name,
                       failed=rule.klass not in ("checkpoint", "fail_slow"))

    def _room(self, key: AttemptKey, type_: str) -> bool:
        """Whether another symptom of this type may be attached for this attempt."""
        seen = self._symptom_counts.get((key, type_), 0) + 1
        self._symptom_counts[(key, type_)] = seen
        return seen <= self.rules.max_symptom_evidence

    def _own_cause(self, inc_id: str, rule: SymptomRule, key: AttemptKey,
                   time: datetime) -> None:
        window = int(self.rules.cause_window_s // 60)
        explanation = (f"No hardware, network, storage or scheduler signal reached {_akey(key)} "
                       f"in the {window} min before its first failure at "
                       f"{time.isoformat()}; classified from the job's own evidence: "
                       f"{rule.why or rule.klass} (rule {rule.name}).")
        self._emit(inc_id, "cause_updated", time, self._actor(rule.name),
                   {"class": rule.klass, "entity": _akey(key), "confidence": 0.5
                    if rule.klass in ("nccl_hang", "job_failure", "hang", "fail_slow") else 0.8,
                    "explanation": explanation, "rank": rule.rank, "source": "job"},
                   f"own:{rule.name}")
        self._route(inc_id, time, rule.name, project=key[0])

    def _reclassify(self, inc_id: str, rule: SymptomRule, time: datetime,
                    key: AttemptKey) -> None:
        """A job-own incident takes the class of its highest-ranked symptom."""
        inc = self.book[inc_id]
        if inc.cause_source != "job" or not inc.key.startswith("job:"):
            return
        current = next((r for r in self.rules.symptoms if r.klass == inc.cause_class), None)
        if current is not None and rule.rank <= current.rank:
            return
        self._own_cause(inc_id, rule, key, time)

    def _explain(self, inc_id: str, signal: Signal, key: AttemptKey, time: datetime,
                 what: str, relation: str, path: str, symptom: Event | None = None) -> None:
        cause = signal.event
        gap = (time - cause.time).total_seconds()
        when = f"{abs(gap):.0f} s {'before' if gap >= 0 else 'after'}"
        linked = path.split(" → ")[-1] if path else ""
        seen_on = f" (seen on {symptom.node})" if symptom and symptom.node else ""
        link = _RELATION_PHRASE.get(relation, f"is linked to it ({relation})")
        entity = cause.entity or cause.node or signal.key
        explanation = (f"{entity} reported {cause.type} ({signal.rule.why or signal.rule.klass})"
                       f" {when} the {what} of {_akey(key)}{seen_on}; "
                       + (f"{linked}, one of the attempt's own, {link}" if linked and
                          relation not in ("self",) else "it is the attempt's own signal")
                       + (f" (path {path})." if path and relation != "self" else "."))
        confidence = _CONFIDENCE.get(relation, 0.5) - (0.1 if gap > 300 else 0.0)
        self._emit(inc_id, "cause_updated", time, self._actor(signal.rule.name),
                   {"class": signal.rule.klass, "entity": entity, "event_id": cause.id,
                    "confidence": round(confidence, 2), "explanation": explanation,
                    "relation": relation, "source": "infrastructure"},
                   f"cause:{cause.id}:{_akey(key)}")
        self._route(inc_id, time, signal.rule.name)

    def _impacted(self, inc_id: str, key: AttemptKey, time: datetime, rule: str,
                  failed: bool) -> None:
        inc = self.book[inc_id]
        if _akey(key) in inc.jobs:
            return
        attempt = self._attempt(key)
        progress = self._progress.get(key, Progress())
        gpus = (attempt.gpus or len(attempt.gpu_ids)) if attempt else 0
        data: dict[str, Any] = {"job": _job(key), "gpus": gpus, "role": "failed" if failed
                                else "degraded"}
        if failed:
            ckpt_at = progress.ckpt_at or (attempt.started_at if attempt else None)
            data.update(failed_at=time.isoformat(), failure_step=progress.last_step,
                        last_checkpoint_step=progress.ckpt_step,
                        last_checkpoint_at=ckpt_at.isoformat() if ckpt_at else None)
            self._by_attempt[key] = inc_id
            self._pending.setdefault((key[0], key[1]), []).append((inc_id, key))
            self._push_timer(time + timedelta(seconds=self.rules.restart_deadline_s),
                             "restart", inc_id, key)
        self._emit(inc_id, "job_impacted", time, self._actor(rule), data, _akey(key))
        self._severity(inc_id, time, rule)
        if inc.key.startswith("node:"):
            standing = self._open.get(f"lemon:{inc.key[5:]}")
            if standing is not None:
                self._emit(standing, "job_impacted", time, self._actor("repeat-offender"),
                           {"job": _job(key), "gpus": gpus, "role": "linked"},
                           f"{inc_id}:{_akey(key)}")

    # --- routing and severity -----------------------------------------------------------

    def _route(self, inc_id: str, time: datetime, rule: str, project: str = "") -> None:
        inc = self.book[inc_id]
        if inc.owner_rule == "manual":
            return  # a person assigned it; the processor does not take it back
        routing = self.rules.routing
        klass, entity = inc.klass, inc.entity
        if klass in routing.job_owner_classes:
            project = project or (inc.projects[0] if inc.projects else entity.split("/")[0])
            team = routing.team_of_project.get(project, f"project:{project}")
            route, why = "job-owner", f"{klass} is the job's own: routed to {project}'s team"
        else:
            match = next((r for r in routing.rules if r.matches(klass, entity)), None)
            if match is None:
                team, route, why = routing.default, "default", f"no routing rule for {klass}"
            else:
                team, route = match.team, match.name
                why = match.why or f"{klass} matches routing rule {match.name}"
        if team != inc.owner:
            self._emit(inc_id, "owner_assigned", time, self._actor(rule),
                       {"team": team, "rule": route, "why": why}, f"owner:{team}:{klass}")

    def _severity(self, inc_id: str, time: datetime, rule: str) -> None:
        inc = self.book[inc_id]
        cfg = self.rules.severity
        level = 0
        reasons = []
        for item in cfg.levels:
            if inc.gpus >= item.min_gpus and inc.lost_gpu_hours >= item.min_lost_gpu_hours:
                idx = _ORDER.index(item.severity)
                if idx > level:
                    level = idx
                    reasons = [f"{item.severity} from impact: " + (
                        f"{inc.gpus} GPUs >= {item.min_gpus}" if item.min_gpus else
                        f"{inc.lost_gpu_hours:.1f} GPU-hours lost >= "
                        f"{item.min_lost_gpu_hours:g}")]
        flags = inc.flags
        priorities = [a.priority for j in inc.jobs.values()
                      if (a := self._attempt((j.project, j.job_id, j.attempt))) and a.priority]
        if priorities and max(priorities) >= cfg.high_priority:
            level, reasons = level + 1, [*reasons, "high-priority job"]
        if cfg.raise_on_repeat and "repeat" in flags:
            level, reasons = level + 1, [*reasons, "repeated on the same entity"]
        if cfg.raise_on_no_restart and "no_restart" in flags:
            level, reasons = level + 1, [*reasons, "no restart within the deadline"]
        severity = _ORDER[min(level, 3)]
        if severity != inc.severity or not inc.severity_why:
            why = "; ".join(reasons) or "below every threshold"
            self._emit(inc_id, "severity_changed", time, self._actor(rule),
                       {"severity": severity, "why": why}, f"severity:{severity}:{why}")

    def _flag(self, inc_id: str, flag: str, time: datetime, rule: str, detail: str) -> None:
        if self._emit(inc_id, "signal_added", time, self._actor(rule),
                      {"flag": flag, "detail": detail}, f"flag:{flag}:{detail}"):
            self._severity(inc_id, time, rule)

    def _repeat_offender(self, node: str, inc_id: str, time: datetime, rule: str) -> None:
        seen = self._node_incidents.setdefault(node, {})
        seen[inc_id] = time
        horizon = time - timedelta(seconds=self.rules.repeat_offender_window_s)
        recent = sorted((t, i) for i, t in seen.items() if t >= horizon)
        if len(recent) < self.rules.repeat_offender_count:
            return
        key = f"lemon:{node}"
        standing = self._open.get(key)
        if standing is None:
            first = self.book[recent[0][1]]
            standing = incident_id(key, first.id)
            self._emit(standing, "opened", time, self._actor("repeat-offender"),
                       {"key": key, "class": "repeat_offender", "entity": node,
                        "title": f"repeat offender: {node}",
                        "first_signal_at": recent[0][0].isoformat()}, "opened")
            self._open[key] = standing
            self._emit(standing, "owner_assigned", time, self._actor("repeat-offender"),
                       {"team": "hardware-ops", "rule": "repeat-offender",
                        "why": f"{node} is behind {len(recent)} incidents: hardware ops "
                               "decide whether to replace it"}, "owner")
            self._emit(standing, "cause_updated", time, self._actor("repeat-offender"),
                       {"class": "repeat_offender", "entity": node, "confidence": 0.8,
                        "explanation": f"{node} is the faulty entity of {len(recent)} incidents "
                                       f"within {self.rules.repeat_offender_window_s / 86400:.0f}"
                                       " days; each is linked here."}, "cause")
        for _, linked in recent:
            self._emit(standing, "signal_added", time, self._actor("repeat-offender"),
                       {"linked": linked}, f"link:{linked}")
            for impact in self.book[linked].jobs.values():
                if _akey((impact.project, impact.job_id, impact.attempt)) not in \
                        self.book[standing].jobs:
                    self._emit(standing, "job_impacted", time, self._actor("repeat-offender"),
                               {"job": _job((impact.project, impact.job_id, impact.attempt)),
                                "gpus": impact.gpus, "role": "linked"},
                               f"{linked}:{impact.key}")

    # --- progress, recovery and impact ---------------------------------------------------

    def _track_progress(self, event: Event) -> None:
        key = self._attempt_key(event)
        progress = self._progress.setdefault(key, Progress())
        attrs = event.attributes
        if event.type == "job.step" and isinstance(attrs.get("step"), int):
            progress.last_step, progress.last_step_at = attrs["step"], event.time
            progress.last_step_event = event.id
            self._arm_hang(progress, key)
            step_time = attrs.get("step_time_s")
            if isinstance(step_time, int | float):
                self._fail_slow(event, key, progress, float(step_time))
            self._recovery_progress(event, key, attrs["step"])
        elif event.type == "checkpoint.saved" and isinstance(attrs.get("step"), int):
            progress.ckpt_step, progress.ckpt_at = attrs["step"], event.time
            progress.failed_ckpt = None
            # a checkpoint is progress too: a slow save is not a hang
            progress.last_step_at, progress.last_step_event = event.time, event.id
            self._arm_hang(progress, key)
        elif event.type == "checkpoint.restored" and isinstance(attrs.get("step"), int):
            for inc_id, failed in self._pending.get((key[0], key[1]), []):
                if failed[2] < key[2]:
                    self._emit(inc_id, "recovery_observed", event.time, self._actor("recovery"),
                               {"job": _job(failed), "stage": "restored",
                                "restored_step": attrs["step"], "by_attempt": key[2]},
                               f"restored:{_akey(failed)}:{key[2]}")
                    self._evidence(inc_id, event, "recovery", "restored from checkpoint",
                                   "recovery", key)
        elif event.type == "job.started":
            self._restarted(event, key)

    def _restarted(self, event: Event, key: AttemptKey) -> None:
        for inc_id, failed in self._pending.get((key[0], key[1]), []):
            if failed[2] >= key[2]:
                continue
            data: dict[str, Any] = {"job": _job(failed), "stage": "restarted",
                                    "restarted_attempt": key[2],
                                    "restarted_at": event.time.isoformat()}
            old = self._attempt(failed)
            overlap = old is not None and (old.ended_at is None or old.ended_at > event.time)
            if overlap:
                data["duplicate_run"] = True
            self._emit(inc_id, "recovery_observed", event.time, self._actor("recovery"), data,
                       f"restarted:{_akey(failed)}:{key[2]}")
            self._evidence(inc_id, event, "recovery", f"attempt {key[2]} started", "recovery",
                           key)
            if overlap:
                self._flag(inc_id, "duplicate_run", event.time, "recovery",
                           f"attempt {key[2]} started while attempt {failed[2]} was still "
                           "running")

    def _recovery_progress(self, event: Event, key: AttemptKey, step: int) -> None:
        pending = self._pending.get((key[0], key[1]), [])
        for inc_id, failed in list(pending):
            if failed[2] >= key[2]:
                continue
            impact = self.book[inc_id].jobs.get(_akey(failed))
            if impact is None:
                continue
            if impact.resumed_at is None:
                self._assess(inc_id, failed, impact.gpus, event)
                impact = self.book[inc_id].jobs[_akey(failed)]
            target = impact.failure_step if impact.failure_step is not None else -1
            if step > target:
                self._emit(inc_id, "recovery_verified", event.time, self._actor("recovery"),
                           {"job": _job(failed), "verified_at": event.time.isoformat(),
                            "step": step, "past": impact.failure_step},
                           f"verified:{_akey(failed)}")
                self._evidence(inc_id, event, "recovery",
                               f"step {step} passed the failure point "
                               f"({impact.failure_step})", "recovery", key)
                pending.remove((inc_id, failed))

    def _assess(self, inc_id: str, failed: AttemptKey, gpus: int, resumed: Event) -> None:
        """Lost GPU-hours = GPUs x (failure - last good checkpoint + failure -> resumed)."""
        impact = self.book[inc_id].jobs[_akey(failed)]
        start = impact.last_checkpoint_at
        failed_at = impact.failed_at or resumed.time
        if start is None:
            start = failed_at
        rework_s = (failed_at - start).total_seconds()
        downtime_s = (resumed.time - failed_at).total_seconds()
        restored = impact.restored_step if impact.restored_step is not None else \
            impact.last_checkpoint_step
        lost_steps = max(0, (impact.failure_step or 0) - (restored or 0)) \
            if impact.failure_step is not None else 0
        charge_s = 0.0
        progress = self._progress.get(failed)
        if progress and progress.failed_ckpt and progress.failed_ckpt[1] != inc_id:
            failed_ckpt_at, ckpt_inc = progress.failed_ckpt
            if start <= failed_ckpt_at <= failed_at:
                charge_s = (failed_ckpt_at - start).total_seconds()
                self._emit(ckpt_inc, "impact_assessed", resumed.time, self._actor("impact"),
                           {"charged_gpu_hours": round(gpus * charge_s / 3600, 6),
                            "from_incident": inc_id, "job": _job(failed), "role": "degraded",
                            "why": "the failed checkpoint would have saved this work"},
                           f"charge:{inc_id}:{_akey(failed)}")
                self._severity(ckpt_inc, resumed.time, "impact")
        lost = round(gpus * (rework_s + downtime_s - charge_s) / 3600, 6)
        self._emit(inc_id, "recovery_observed", resumed.time, self._actor("recovery"),
                   {"job": _job(failed), "stage": "progress_resumed",
                    "resumed_at": resumed.time.isoformat()},
                   f"resumed:{_akey(failed)}")
        self._emit(inc_id, "impact_assessed", resumed.time, self._actor("impact"),
                   {"job": _job(failed), "lost_gpu_hours": lost, "lost_steps": lost_steps,
                    "rework_s": rework_s - charge_s, "downtime_s": downtime_s,
                    "charged_elsewhere_gpu_hours": round(gpus * charge_s / 3600, 6)},
                   f"assess:{_akey(failed)}")
        self._severity(inc_id, resumed.time, "impact")

    def _fail_slow(self, event: Event, key: AttemptKey, progress: Progress,
                   step_time: float) -> None:
        cfg = self.rules.progress.fail_slow
        if len(progress.step_times) < cfg.baseline_steps:
            progress.step_times.append(step_time)
            return
        baseline = statistics.median(progress.step_times)
        if step_time <= baseline * cfg.ratio:
            progress.slow_since = None
            return
        progress.slow_since = progress.slow_since or event.time
        if progress.slow_reported or (event.time - progress.slow_since).total_seconds() < \
                cfg.for_s:
            return
        if key in self._by_attempt and self.book[self._by_attempt[key]].active:
            return
        progress.slow_reported = True
        rule = SymptomRule.model_validate(
            {"name": "fail-slow", "types": ["job.step"], "class": "fail_slow", "rank": 10,
             "why": f"step time {step_time:.2f} s is above {cfg.ratio:g} x the baseline "
                    f"{baseline:.2f} s for {cfg.for_s / 60:.0f} min with no error"})
        # localise: any signal in the fault domain since shortly before it slowed down
        since = progress.slow_since - timedelta(seconds=self.rules.cause_window_s)
        self._symptom(event, rule, key, event.time, f"slow:{_akey(key)}", since)

    # --- timers (event time) ------------------------------------------------------------

    def _arm_hang(self, progress: Progress, key: AttemptKey) -> None:
        """One pending hang timer per attempt; it re-arms itself when progress moved on."""
        if not progress.hang_armed and progress.last_step_at is not None:
            progress.hang_armed = True
            self._push_timer(progress.last_step_at + self._hang_after, "hang", "", key)

    def _push_timer(self, when: datetime, kind: str, ref: str, key: AttemptKey) -> None:
        self._timer_seq += 1
        heapq.heappush(self._timers, (when, self._timer_seq, kind, ref, key))

    def _advance(self, time: datetime) -> None:
        if self.watermark is not None and time <= self.watermark:
            return
        self.watermark = time
        while self._timers and self._timers[0][0] < time:
            when, _, kind, ref, key = heapq.heappop(self._timers)
            if kind == "hang":
                self._hang(when, ref, key)
            elif kind == "restart":
                self._no_restart(when, ref, key)
        horizon = time - timedelta(seconds=max(self.rules.cause_window_s,
                                               self.rules.group_window_s) * 2)
        while self._signals and self._signals[0].event.time < horizon:
            self._signals.popleft()

    def _hang(self, when: datetime, _ref: str, key: AttemptKey) -> None:
        progress = self._progress.get(key)
        attempt = self._attempt(key)
        if progress is None or progress.last_step_at is None:
            return
        progress.hang_armed = False
        if progress.last_step_at + self._hang_after > when:
            self._arm_hang(progress, key)  # progress moved on since this timer was set
            return
        step_event = progress.last_step_event
        if attempt is not None and attempt.outcome:
            return  # the attempt ended; its end is the symptom, not a hang
        if key in self._by_attempt and self.book[self._by_attempt[key]].active:
            return
        minutes = self.rules.progress.hang_after_s / 60
        rule = SymptomRule.model_validate(
            {"name": "hang", "types": ["job.step"], "class": "hang", "rank": 25,
             "why": f"no progress for {minutes:.0f} min after step {progress.last_step}"})
        self._symptom(None, rule, key, when, f"hang:{step_event}")

    def _no_restart(self, when: datetime, inc_id: str, key: AttemptKey) -> None:
        inc = self.book.get(inc_id)
        if inc is None or not inc.active:
            return
        impact = inc.jobs.get(_akey(key))
        if impact is None or impact.restarted_attempt is not None:
            return
        minutes = self.rules.restart_deadline_s / 60
        self._flag(inc_id, "no_restart", when, "restart-deadline",
                   f"{_akey(key)} not restarted within {minutes:.0f} min")
