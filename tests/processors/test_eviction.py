"""Incidents evicted from memory come back from their log when needed, and the incident log
does not depend on it: the same input with eviction forced (every settled or quiet incident
leaves at once) and with it off gives the same log, event for event, whatever the arrival
order, with people's commands (resolve, close, note, reopen, a postmortem draft) landing on
incidents long evicted and late evidence for the same cause arriving after."""

from __future__ import annotations

import zlib
from datetime import timedelta

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from bench import stories
from processors.incidents.archive import MemoryArchive
from processors.incidents.eviction import Eviction
from processors.incidents.model import Actor, Command, IncidentEvent, fold
from processors.pipeline import Outputs, Pipeline
from schemas.events import Event

FORCED = Eviction(after=timedelta(0), quiet_after=timedelta(0))
GAP = timedelta(hours=3)
PERSON = Actor(kind="person", name="ana")


def _shifted(story: stories.Story, round_: int) -> list[Event]:
    """The story `round_` gaps later, its jobs its own (stories reuse job names)."""
    return [e.model_copy(update={"time": e.time + GAP * round_, "job_id": e.job_id and
                                 f"{e.job_id}-r{round_}"}) for _, e in story.events]


class Run:
    """One pipeline fed like a runtime: each output written to the archive (the store)."""

    def __init__(self, evict: bool) -> None:
        self.pipeline = Pipeline(timedelta(seconds=30), stories.wiring(),
                                 lateness=timedelta(minutes=10))
        self.pipeline.job_retention = timedelta(hours=1)  # jobs (and their holds) go soon
        self.archive = MemoryArchive()
        if evict:
            self.pipeline.archive(self.archive, FORCED)
        self.log: list[IncidentEvent] = []
        self.refused: list[str] = []

    def _keep(self, out: Outputs) -> None:
        self.archive.add(out.incidents)
        self.log.extend(out.incidents)

    def process(self, events: list[Event]) -> None:
        self._keep(self.pipeline.process(events))

    def command(self, command: Command) -> None:
        try:
            self._keep(self.pipeline.command(command))
        except ValueError as exc:  # a refused command is refused alike in both runs
            self.refused.append(f"{command.command_id}: {exc}")


def _commands(log: list[IncidentEvent], round_: int, at: Event) -> list[Command]:
    """What people do after a story: resolve what is active, close an older resolved one,
    note on the first incident, reopen one, draft a postmortem."""
    incidents = fold(list(log))
    out: list[Command] = []

    def cmd(name: str, inc_id: str, **data: object) -> None:
        out.append(Command(command_id=f"r{round_}-{name}-{inc_id[:12]}", incident_id=inc_id,
                           command=name, actor=PERSON, time=at.time, data=dict(data)))

    for inc in sorted(incidents.values(), key=lambda i: i.id):
        if inc.withdrawn:
            continue
        if inc.active:
            cmd("resolve", inc.id, summary="fixed")
        elif inc.status == "resolved" and zlib.crc32(inc.id.encode()) % 3 == round_ % 3:
            cmd("close", inc.id)
    if incidents:
        first = min(incidents)
        cmd("note", first, text=f"round {round_}")
        cmd("draft_postmortem", first)
        if round_ % 2:
            cmd("reopen", max(incidents), why="it came back")
    return out


def _drive(runs: list[Run], seeds: list[int], classes: list[str], jitter: int,
           batch: int) -> None:
    for round_, (seed, klass) in enumerate(zip(seeds, classes, strict=True)):
        story = stories.of_class(seed, klass)
        events = _shifted(story, round_)
        order = sorted(range(len(events)), key=lambda i: events[i].time + timedelta(
            seconds=zlib.crc32(events[i].id.encode()) % (jitter + 1)))
        arrival = [events[i] for i in order]
        for start in range(0, len(arrival), batch):
            for run in runs:
                run.process(arrival[start:start + batch])
        for command in _commands(runs[0].log, round_, arrival[-1]):
            for run in runs:
                run.command(command)


def _same(off: Run, forced: Run) -> None:
    assert [e.model_dump(mode="json") for e in forced.log] == \
        [e.model_dump(mode="json") for e in off.log]
    assert forced.refused == off.refused


def test_forced_eviction_gives_the_same_log_and_holds_only_open_work() -> None:
    off, forced = Run(evict=False), Run(evict=True)
    classes = list(stories.CLASSES) * 2
    _drive([off, forced], list(range(len(classes))), classes, jitter=120, batch=7)
    _same(off, forced)
    total = len(fold(off.log))
    held = forced.pipeline.detector.book.incidents
    assert total > 10 and len(off.pipeline.detector.book.incidents) == total
    assert forced.archive.hits > 10  # evicted incidents came back from the log when needed
    assert len(held) < total


def test_late_evidence_for_an_evicted_incident_attaches_to_it() -> None:
    """Resolved, evicted, then a signal on the same entity within the reopen window: the
    same incident takes it back (no second one), exactly as when it stayed in memory."""
    story = stories.of_class(3, "gpu_hardware")
    events = [e for _, e in story.events]
    runs = [Run(evict=False), Run(evict=True)]
    for run in runs:
        run.process(events)
    last = events[-1]

    def tick(name: str, after: timedelta) -> Event:  # moves the watermark, decides nothing
        return last.model_copy(update={"id": name, "time": last.time + after,
                                       "type": "job.step", "attributes": {"step": 1}})

    for run in runs:
        run.process([tick("tick-1", timedelta(hours=2))])
    opened = {e.incident_id for e in runs[0].log if e.kind == "opened"}
    for inc_id in sorted(opened):
        for run in runs:
            run.command(Command(command_id=f"res-{inc_id[:12]}", incident_id=inc_id,
                                command="resolve", actor=PERSON,
                                time=last.time + timedelta(hours=2), data={"summary": "ok"}))
    for run in runs:
        run.process([tick("tick-2", timedelta(hours=2, minutes=15))])
    held = dict.keys(runs[1].pipeline.detector.book.incidents)
    evicted = sorted(opened - set(held))
    assert evicted and len(held) < len(dict.keys(runs[0].pipeline.detector.book.incidents))
    gone = fold(runs[0].log)[evicted[0]]
    first = next(e for e in events if e.id == gone.cause_event)
    again = first.model_copy(update={"id": "xid-again",
                                   "time": last.time + timedelta(hours=2, minutes=20)})
    before = len(runs[1].log)
    for run in runs:
        run.process([again])
    _same(*runs)
    after = runs[1].log[before:]
    assert [e.kind for e in after][:1] == ["reopened"] and after[0].incident_id in evicted
    assert not [e for e in after if e.kind == "opened"]


@settings(max_examples=12, deadline=None, derandomize=True,
          phases=(Phase.explicit, Phase.reuse, Phase.generate),
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(stories.CLASSES), min_size=2, max_size=5),
       st.integers(0, 1500), st.integers(1, 40), st.integers(0, 50))
def test_any_arrival_order_gives_the_same_log_with_eviction_forced(
        classes: list[str], jitter: int, batch: int, first_seed: int) -> None:
    runs = [Run(evict=False), Run(evict=True)]
    _drive(runs, [first_seed + i for i in range(len(classes))], classes, jitter, batch)
    _same(*runs)
