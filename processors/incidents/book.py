"""The detector's memory and the one way its decisions are written: `Book.emit`.

Every concern (grouping, cause, routing, severity, impact, recovery, slow-down, repeat
offenders, proposed actions) decides from this state and the event in hand, and appends
through `emit`, which refuses a decision already taken (same deterministic id), checks the
transition, folds the event into the incident and keeps the indexes the concerns look
things up by. No I/O, no clock: time is the events' own.
"""

from __future__ import annotations

import heapq
import pickle
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from processors.attempts import Attempt, JobRecord
from processors.incidents.archive import Incidents
from processors.incidents.model import (
    Actor,
    Command,
    IncidentEvent,
    InvalidTransition,
    apply,
    event_id,
    fold,
    new_event,
)
from processors.incidents.rules import SignalRule
from schemas import incident_events as ev
from schemas.events import Event
from schemas.incident_events import JobRef, Payload

AttemptKey = tuple[str, str, int]


def akey(key: AttemptKey) -> str:
    return f"{key[0]}/{key[1]}/{key[2]}"


def jobref(key: AttemptKey) -> JobRef:
    return JobRef(project=key[0], job_id=key[1], attempt=key[2])


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


def millis(time: datetime, *, up: bool = False) -> int:
    """A time as whole milliseconds since the epoch (exact for the times we store, which
    are whole ms); `up` rounds a finer one up, so that for a stored time `t`,
    `millis(t) < millis(bound, up=True)` exactly when `t < bound`."""
    return -((_EPOCH - time) // _MS) if up else (time - _EPOCH) // _MS


def from_millis(ms: int) -> datetime:
    """The time `millis` gave `ms` for (exact for whole milliseconds)."""
    return _EPOCH + timedelta(milliseconds=ms)


def title(text: str, cluster: str) -> str:
    """An incident's title names its cluster: two clusters' `node-001` are told apart."""
    return f"{text} in {cluster}" if cluster else text


def node_of(entity: str) -> str:
    return entity.split("/", 1)[0] if entity else ""


def actor(rule: str) -> Actor:
    return Actor(kind="processor", name="detector", rule=rule)


class NotInLog(Exception):
    """Replaying recent events after a restart reached a decision the log does not hold
    (the original run, seeing another order, did not take it): the decision is skipped."""


@dataclass
class Signal:
    event: Event
    rule: SignalRule
    key: str
    reached: dict[AttemptKey, tuple[str, str]]  # attempt -> (relation, link path)
    packed: tuple[bytes, bytes] | None = field(default=None, init=False, repr=False,
                                               compare=False)
    """The event as JSON and (`key`, `reached`) pickled: made when the book is first packed
    with the signal (`Book.pack`), again only after `reach` changed it (None until then).
    One tuple, shared by every checkpoint that holds the signal."""
    encoded: bytes | None = field(default=None, init=False, repr=False, compare=False)
    """The event as JSON, once: the event never changes, only the reach does."""

    def reach(self, attempt: AttemptKey, how: tuple[str, str]) -> None:
        """Another attempt this signal's fault domain reached (`reached` changes only here)."""
        if attempt not in self.reached:
            self.reached[attempt] = how
            self.packed = None

    def pack(self) -> tuple[bytes, bytes]:
        if self.packed is None:
            if self.encoded is None:
                self.encoded = self.event.to_json().encode()
            self.packed = (self.encoded, pickle.dumps((self.key, self.reached),
                                                      protocol=pickle.HIGHEST_PROTOCOL))
        return self.packed

    @classmethod
    def unpack(cls, rule: SignalRule, encoded: bytes, rest: bytes) -> Signal:
        key, reached = pickle.loads(rest)  # noqa: S301 - our own bytes
        signal = cls(Event.model_validate_json(encoded), rule, key, reached)
        signal.encoded, signal.packed = encoded, (encoded, rest)
        return signal


@dataclass
class Progress:
    last_step: int | None = None
    last_step_at: datetime | None = None
    last_step_event: str = ""
    ckpt_step: int | None = None
    ckpt_at: datetime | None = None
    failed_ckpt: tuple[datetime, str] | None = None  # (time, checkpoint incident)
    normal: deque[float] = field(default_factory=lambda: deque(maxlen=64))
    """Recent step times that were not slow: the attempt's own baseline."""
    slow_since: datetime | None = None
    slow_samples: list[float] = field(default_factory=list)
    slow_reported: bool = False
    slow_incident: str = ""
    degraded_s: float = 0.0
    degraded_gpu_hours: float = 0.0
    by_node: dict[str, deque[float]] = field(default_factory=dict)
    """Recent step times reported by each node's ranks (straggler detection)."""
    straggler: dict[str, tuple[datetime, str, list[float]]] = field(default_factory=dict)
    """node -> (slow since, incident once reported, slow samples)"""
    uncertain: tuple[datetime, datetime] | None = None
    """The interval the attempt's first symptom lies in when its line had no time of its own
    (`time_lower`, `time_upper`): a signal inside it may have come first."""
    hang_armed: bool = False
    saves: deque[float] = field(default_factory=lambda: deque(maxlen=16))
    """Recent checkpoint save durations (s): the attempt's usual save."""
    stalls: list[tuple[datetime, datetime, str]] = field(default_factory=list)
    """(from, to, event) saves that took `STALL_RATIO` x the usual: impact of a shared
    entity's incident even though the attempt never failed."""
    first_step: int | None = None
    first_step_at: datetime | None = None
    """The attempt's first progress report: where and when it resumed (processors/gpu_time)."""
    saved: list[tuple[int, datetime]] = field(default_factory=list)
    """Checkpoints the attempt wrote that finished (step, time), the newest `SAVES_KEPT`."""
    started_saves: list[tuple[int, datetime]] = field(default_factory=list)
    """Saves that started and have not said they finished (a checkpoint once restored)."""
    restored: int | None = None
    restore_failed: bool = False
    failed_at: datetime | None = None
    """The attempt's first failure symptom, as the incident that holds it has it."""


@dataclass
class Book:
    jobs: dict[tuple[str, str], JobRecord] = field(default_factory=dict)
    """Attempts as the detector saw them, folded in arrival order (batching cannot change
    what it knew at each event)."""
    incidents: Incidents = field(default_factory=Incidents)
    """In memory, and folded back from the log when asked for once evicted (`archive`)."""
    last_touch: dict[str, datetime] = field(default_factory=dict)
    """incident -> the watermark at its last decision (eviction measures quiet from it)"""
    watermark: datetime | None = None
    cluster: str = ""
    """The cluster of the events decided (a runtime holds one detector per cluster)."""
    replaying: bool = False
    open: dict[str, str] = field(default_factory=dict)  # grouping key -> active incident
    resolved: dict[str, str] = field(default_factory=dict)  # grouping key -> last resolved
    resolved_at: dict[str, datetime] = field(default_factory=dict)  # grouping key -> when
    by_attempt: dict[AttemptKey, str] = field(default_factory=dict)
    signals: deque[Signal] = field(default_factory=deque)
    changes: deque[Signal] = field(default_factory=deque)
    """Changes applied to nodes, standing for the attempts that start after them
    (`changes`), kept for `change_window_s`."""
    counts: dict[tuple[str, str], deque[int]] = field(default_factory=dict)
    """(rule, key) -> the times of its signals inside the rule's window, in milliseconds
    (`millis`: an int pickles in a fraction of a datetime's time; the book is pickled
    at every lateness checkpoint)"""
    progress: dict[AttemptKey, Progress] = field(default_factory=dict)
    pending: dict[tuple[str, str], list[tuple[str, AttemptKey]]] = field(default_factory=dict)
    saved_paths: dict[tuple[str, str], tuple[str, int]] = field(default_factory=dict)
    """(project, checkpoint root) -> (job, attempt) that last saved a checkpoint there
    (`continuation`)"""
    continued: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    """(project, job) -> the (project, job) it continues: resubmitted under a new id, it
    restored that job's checkpoint (`continuation`)"""
    timers: list[tuple[datetime, int, str, str, AttemptKey]] = field(default_factory=list)
    timer_seq: int = 0
    node_incidents: dict[str, dict[str, datetime]] = field(default_factory=dict)
    symptom_counts: dict[tuple[AttemptKey, str], int] = field(default_factory=dict)
    refused: int = 0
    opened_observed: dict[str, datetime] = field(default_factory=dict)
    planned: dict[str, tuple[datetime, str, str]] = field(default_factory=dict)
    """node -> (planned window ends, the change or ticket cited, its event id)"""
    blamed: dict[str, tuple[Signal, str, datetime, tuple[str, ...]]] = field(
        default_factory=dict)
    """node -> (the cause that failed an attempt on it, its incident, when, the attempts it
    failed): the same node in a later attempt is a candidate again (`blame`)"""
    drains: dict[str, set[str]] = field(default_factory=dict)
    """node -> the incidents holding its drain as evidence (its return is attached there)"""
    powered: dict[str, tuple[datetime, datetime, str]] = field(default_factory=dict)
    """node -> (it lost power, its power window ends, the power event's id): what follows on
    the node is the power loss's consequence (`power`)"""
    ready: dict[str, deque[datetime]] = field(default_factory=dict)
    """node -> its recent `node.ready` times (a fault declared over before an attempt started
    on the node cannot explain that attempt's failure)"""
    folded: dict[str, int] = field(default_factory=dict)
    """incident -> signals counted past `max_signal_evidence` and not yet logged"""
    out: list[IncidentEvent] = field(default_factory=list)

    def pack(self) -> tuple[dict[str, Any], list[tuple[bytes, bytes]]]:
        """The state to pickle, with the signals' rules only, and each signal as bytes,
        pickled once in its life (again only after `Signal.reach`). A lateness checkpoint
        pickles the book every quarter of the horizon while a signal stays an hour:
        pickling each event and its reach again was most of a checkpoint's cost
        (`bench.profile`); a checkpoint keeps the bytes the live signals hold by reference."""
        state = dict(self.__dict__)
        state["signals"] = [s.rule for s in self.signals]
        return state, [s.pack() for s in self.signals]

    @classmethod
    def unpack(cls, state: dict[str, Any], signals: list[tuple[bytes, bytes]]) -> Book:
        book = cls.__new__(cls)
        book.__dict__.update({**state, "signals": deque(
            Signal.unpack(rule, *packed)
            for rule, packed in zip(state["signals"], signals, strict=True))})
        return book

    def __getstate__(self) -> dict[str, Any]:
        state, signals = self.pack()
        return {**state, "signals": list(zip(state["signals"], signals, strict=True))}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update({**state, "signals": deque(
            Signal.unpack(rule, *packed) for rule, packed in state["signals"])})

    # --- reading ------------------------------------------------------------------------

    def attempt(self, key: AttemptKey) -> Attempt | None:
        job = self.jobs.get((key[0], key[1]))
        return job.attempts.get(key[2]) if job else None

    def cleared(self, node: str, after: datetime, before: datetime) -> bool:
        """The node was declared ready in (after, before]: a fault it reported at `after`
        was over by `before`."""
        return any(after < t <= before for t in self.ready.get(node, ()))

    def active(self, key: AttemptKey) -> str | None:
        """The active incident that holds this attempt, if any."""
        held = self.by_attempt.get(key)
        return held if held is not None and self.incidents[held].active else None

    def attempt_key(self, event: Event) -> AttemptKey:
        """The event's attempt: its own number, else the job's attempt running at its time."""
        number = event.attempt
        if number is None:
            job = self.jobs.get((event.project, event.job_id or ""))
            number = (job.attempt_at(event.time) if job else None) or 1
        return (event.project, event.job_id or "", number)

    # --- writing ------------------------------------------------------------------------

    def emit(self, inc_id: str, payload: Payload, time: datetime, rule: str,
             discriminator: str) -> bool:
        """Append one decision unless it was already taken (same id); True when appended."""
        state = self.incidents.get(inc_id)
        if state is not None and event_id(inc_id, payload.KIND, discriminator) in state.applied:
            return False
        if self.replaying:
            return False
        try:
            event = new_event(state, inc_id, payload, time, actor(rule), discriminator)
        except InvalidTransition:
            self.refused += 1  # a processor decision the state refuses is counted, not raised
            return False
        self.record(event)
        return True

    def evidence(self, inc_id: str, event: Event, role: str, why: str, rule: str,
                 attempt: AttemptKey | None = None) -> None:
        if event.id in self.incidents[inc_id].evidence:
            return  # the same event is never attached twice
        self.emit(inc_id, ev.EvidenceAttached(
            event_id=event.id, time=event.time, type=event.type, source=event.source.value,
            entity=event.entity or event.node or "", why=why, role=role, project=event.project,
            job_id=event.job_id or "", attempt=attempt[2] if attempt else event.attempt),
            event.time, rule, event.id)
        if event.type == "node.drained" and (node := node_of(event.node or event.entity or "")):
            self.drains.setdefault(node, set()).add(inc_id)
        drill = event.attributes.get("drill")
        if drill and "drill" not in self.incidents[inc_id].flags:
            # a recovery drill's fault (jobtrail drill run): recorded as one, pages nobody,
            # left out of the fleet's reliability figures
            self.emit(inc_id, ev.SignalAdded(flag="drill", detail=f"recovery drill {drill}"),
                      event.time, rule, "drill")

    def record(self, event: IncidentEvent) -> None:
        inc = apply(self.incidents.get(event.incident_id), event)
        self.incidents[inc.id] = inc
        self.last_touch[inc.id] = max(self.watermark or event.time, event.time)
        self.out.append(event)
        if inc.key and event.kind in ("resolved", "closed"):
            if self.open.get(inc.key) == inc.id:
                self.open.pop(inc.key)
            self.resolved[inc.key] = inc.id
            self.resolved_at[inc.key] = event.time
            for key, held in list(self.by_attempt.items()):
                if held == inc.id:
                    del self.by_attempt[key]
        elif inc.key and event.kind == "reopened":
            self.open[inc.key] = inc.id

    def command(self, command: Command) -> list[IncidentEvent]:
        """A person's or team's request: validated, then logged (InvalidTransition says
        why not); a command id seen before returns []."""
        from processors.postmortem.commands import decide

        state = self.incidents.fetch(command.incident_id)
        if state is not None and command.command_id in state.commands:
            return []
        if command.command == "draft_postmortem" and state is not None:
            self.incidents.recall_on({x for x in (state.entity, state.cause_entity) if x})
        payload = decide(command, state, self.incidents)
        event = new_event(state, command.incident_id, payload, command.time,
                          command.actor, command.command_id, command.command_id)
        self.out = []
        self.record(event)
        out, self.out = self.out, []
        return out

    def push_timer(self, when: datetime, kind: str, ref: str, key: AttemptKey) -> None:
        self.timer_seq += 1
        heapq.heappush(self.timers, (when, self.timer_seq, kind, ref, key))

    def room(self, key: AttemptKey, type_: str, cap: int) -> bool:
        """Whether another symptom of this type may be attached for this attempt."""
        seen = self.symptom_counts.get((key, type_), 0) + 1
        self.symptom_counts[(key, type_)] = seen
        return seen <= cap

    # --- restart ------------------------------------------------------------------------

    def restore(self, log: Sequence[IncidentEvent], jobs: Mapping[tuple[str, str], JobRecord],
                node_of: Any, node_grouped: Any) -> None:
        """Rebuild the incidents and their indexes from the log (and the known attempts),
        when no snapshot can be used."""
        self.jobs.update(jobs)
        self.incidents = Incidents(fold(list(log)), self.incidents.evicted).like(self.incidents)
        for inc in self.incidents.values():
            if inc.active and inc.key:
                self.open[inc.key] = inc.id
            elif inc.key:
                self.resolved[inc.key] = inc.id
                at = inc.closed_at or inc.resolved_at
                if at is not None:
                    self.resolved_at[inc.key] = at
            for impact in inc.jobs.values():
                key = (impact.project, impact.job_id, impact.attempt)
                if inc.active and impact.role == "failed":
                    self.by_attempt[key] = inc.id
                if impact.verified_at is None and inc.active and impact.role == "failed":
                    self.pending.setdefault((impact.project, impact.job_id), []).append(
                        (inc.id, key))
                if impact.restarted_job and impact.restarted_job != impact.job_id:
                    self.continued.setdefault((impact.project, impact.restarted_job),
                                              (impact.project, impact.job_id))
            node = node_of(inc.cause_entity) if node_grouped(inc.cause_class) else ""
            if node and inc.opened_at:
                self.node_incidents.setdefault(node, {})[inc.id] = inc.opened_at
