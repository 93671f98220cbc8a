"""The fast path decides what the slow path decides: an event that can never open, join or
revise an incident (`processors.incidents.inert`) only moves the detector's time on, and every
story the repository tells, in every arrival order it is told in, gives the same incident
log event for event (ids, kinds, times, payloads) with `Pipeline.fast` on and off."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from bench import fleet, stories
from ingest.canonical import decode
from jobtrail.learn.scenarios import DEFAULT_LATENESS
from processors.incidents.inert import inert
from processors.incidents.model import IncidentEvent
from processors.incidents.rules import Rules, load_rules
from processors.pipeline import Pipeline
from schemas.events import Event
from tests.scenarios.library import library, load, offset, wiring

T0 = datetime(2026, 11, 3, 8, 0, tzinfo=UTC)


@contextmanager
def path(fast: bool) -> Iterator[None]:
    was = Pipeline.fast
    Pipeline.fast = fast
    try:
        yield
    finally:
        Pipeline.fast = was


def both(run: Callable[[], tuple[list[IncidentEvent], Pipeline]]
         ) -> tuple[list[dict[str, Any]], Pipeline, Pipeline]:
    """The log of `run` on each path (asserted identical), and both pipelines."""
    with path(False):
        slow, slow_p = run()
    with path(True):
        fast, fast_p = run()
    dumped = [e.model_dump(mode="json") for e in slow]
    assert [e.model_dump(mode="json") for e in fast] == dumped
    assert (fast_p.reorder.reevaluations, fast_p.reorder.stragglers,
            fast_p.reorder.revisions) == (slow_p.reorder.reevaluations,
                                          slow_p.reorder.stragglers, slow_p.reorder.revisions)
    return dumped, slow_p, fast_p


def _through(pipeline: Pipeline, events: list[Event], batch: int = 1
             ) -> tuple[list[IncidentEvent], Pipeline]:
    log: list[IncidentEvent] = []
    for i in range(0, len(events), batch):
        log += pipeline.process(events[i:i + batch]).incidents
    return log, pipeline


def _files_back_to_front(events: list[Event]) -> list[Event]:
    by_time = sorted(events, key=lambda e: (e.time, e.id))
    return sorted(by_time, key=lambda e: e.source.value, reverse=True)


def _with_health_checks(events: list[Event], rules: Rules) -> list[Event]:
    """The story as a fleet tells it: a passing health check of each of its nodes (and of
    one node outside it) every minute, from 5 minutes before its first event to 20 after
    its last (its timers, a hang's or a restart's deadline, come due on them), in time order
    among the story's events (the same arrival order otherwise)."""
    nodes = sorted({e.node for e in events if e.node} | {"fleet-spare-1"})
    first, last = min(e.time for e in events), max(e.time for e in events)
    records, t = [], first - timedelta(minutes=5)
    while t <= last + timedelta(minutes=20):
        records += [{"id": f"fp-health-{n}-{t.timestamp():.0f}", "type": "node.health",
                     "time": t.isoformat().replace("+00:00", "Z"), "cluster": events[0].cluster,
                     "scope": "node", "entity": n, "node": n,
                     "attributes": {"system": "all", "status": "pass", "checks": 12}}
                    for n in nodes]
        t += timedelta(minutes=1)
    checks = _events(records)
    assert all(inert(rules, c) for c in checks)
    out: list[Event] = []
    pending = iter(checks)
    nxt = next(pending, None)
    for event in events:  # each check arrives when event time (as delivered) passes it
        while nxt is not None and nxt.time <= event.time:
            out.append(nxt)
            nxt = next(pending, None)
        out.append(event)
    return out + ([nxt] if nxt is not None else []) + list(pending)


@pytest.mark.parametrize("order", ["as-told", "files-back-to-front", "time"])
@pytest.mark.parametrize("story", library(), ids=lambda p: p.stem)
def test_every_library_story_gives_the_same_log_on_both_paths(story: Path, order: str) -> None:
    scenario = load(story)
    events = list(scenario.events)
    events = {"as-told": events, "files-back-to-front": _files_back_to_front(events),
              "time": sorted(events, key=lambda e: (e.time, e.id))}[order]
    events = _with_health_checks(events, scenario.rules)

    def run() -> tuple[list[IncidentEvent], Pipeline]:
        return _through(Pipeline(timedelta(seconds=30), wiring(scenario),
                                 lateness=offset(scenario.raw.get("lateness", DEFAULT_LATENESS)),
                                 rules=scenario.rules), events)

    log, _, _ = both(run)
    assert log, "every story opens an incident"


@pytest.mark.parametrize("delivery", ["time", "files", "live"])
@pytest.mark.parametrize("seed", range(0, 24, 3))
def test_generated_stories_in_every_delivery_give_the_same_log(seed: int, delivery: str
                                                                ) -> None:
    story = stories.of_class(seed, stories.CLASSES[seed % len(stories.CLASSES)])
    events = _with_health_checks(stories.deliveries(story, seed, (delivery,))[delivery],
                                 load_rules())

    def run() -> tuple[list[IncidentEvent], Pipeline]:
        return _through(Pipeline(timedelta(seconds=30), stories.wiring(),
                                 lateness=stories.HORIZON), events)

    both(run)


class Failing(fleet.FleetLoad):
    XID_PER_NODE_H = 0.05  # a few GPUs off the bus in the hours of 64 nodes


def test_a_fleet_with_late_sources_gives_the_same_log() -> None:
    """The documented fleet mix (`bench.fleet`: most events are passing health checks),
    with a GPU falling off the bus under a job; the node source arrives 3 minutes late, so
    the job's symptoms come before their cause and re-evaluations replay over the health
    checks; batches of 500 as a worker takes them."""
    events = fleet.events(6000, nodes=64, seed=7, load=Failing)
    assert sum(e.type == "node.xid" for e in events) >= 3
    rules = load_rules()
    assert sum(inert(rules, e) for e in events) > len(events) // 3
    lag = timedelta(minutes=3)
    arrival = sorted(events, key=lambda e: (e.time + (lag if e.node and not e.job_id else
                                                      timedelta()), e.id))

    def run() -> tuple[list[IncidentEvent], Pipeline]:
        return _through(Pipeline(timedelta(seconds=30), lateness=timedelta(minutes=10)),
                        arrival, batch=500)

    log, slow_p, _ = both(run)
    assert slow_p.reorder.reevaluations > 0
    opened = [e for e in log if e["kind"] == "opened"]
    assert any(e["data"]["class"] == "gpu_hardware" for e in opened), opened


# --- targeted: a timer due on an inert event's time, late evidence behind inert events ------


def _events(records: list[dict[str, Any]]) -> list[Event]:
    text = "\n".join(json.dumps(r) for r in records)
    return [e for e in decode(text, producer="test", observed_at=T0) if isinstance(e, Event)]


def _at(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def _health(n: int, seconds: float, node: str = "n2") -> dict[str, Any]:
    return {"id": f"health-{n}", "type": "node.health", "time": _at(seconds), "cluster": "c",
            "scope": "node", "entity": node, "node": node,
            "attributes": {"system": "all", "status": "pass", "checks": 12}}


def _job(kind: str, seconds: float, **more: Any) -> dict[str, Any]:
    return {"id": f"{kind}-{seconds}", "type": kind, "time": _at(seconds), "project": "p",
            "cluster": "c", "job_id": "j1", "attempt": 1, **more}


def test_a_hang_fires_at_the_inert_event_that_passes_its_deadline() -> None:
    """The job's last step is at 60 s; the hang deadline (`hang.after_s`, 900 s) passes
    while only passing health checks arrive (inert). The hang opens at the first health
    check after the deadline, in that event's batch, on both paths."""
    after = load_rules().progress.hang.after_s
    records = [_job("job.started", 0, attributes={"nodes": ["n1"], "gpus": 8}),
               _job("job.step", 60, attributes={"step": 1, "step_time_s": 1.0})]
    records += [_health(k, 60 + 120 * k) for k in range(1, 12)]  # to 1,380 s
    events = _events(records)
    due = next(i for i, e in enumerate(events)
               if e.time > T0 + timedelta(seconds=60 + after))
    assert all(inert(load_rules(), e) for e in events[2:])

    def run() -> tuple[list[IncidentEvent], Pipeline]:
        pipeline = Pipeline(timedelta(seconds=30))
        log: list[IncidentEvent] = []
        for i, event in enumerate(events):
            out = pipeline.process([event]).incidents
            assert bool(out) == (i == due), (i, event.id, [e.kind for e in out])
            log += out
        return log, pipeline

    log, _, _ = both(run)
    opened = [e for e in log if e["kind"] == "opened"]
    assert len(opened) == 1 and opened[0]["data"]["class"] == "hang", log


def test_a_late_cause_behind_inert_events_revises_the_incident_the_same_way() -> None:
    """The job's ranks time out and it fails; passing health checks move time on for
    minutes; then the Xid under it, 10 s before the timeouts, arrives, and after it a health
    check older than everything (late and inert: re-evaluated too). The late cause revises
    the incident, over a replay that passes the inert events by, as the slow path does."""
    records = [_job("job.started", 0, attributes={"nodes": ["n1"], "gpus": 8})]
    records += [_job("job.step", 10 + 10 * k, attributes={"step": k, "step_time_s": 1.0})
                for k in range(5)]
    records += [_job("comm.nccl_timeout", 70 + k * 0.1, node="n1", severity="error",
                     message="Watchdog caught collective operation timeout",
                     attributes={"rank": k}) | {"id": f"nccl-{k}"} for k in range(8)]
    records.append(_job("job.failed", 75, severity="error", message="NCCL watchdog timeout"))
    records += [_health(k, 80 + 20 * k) for k in range(1, 12)]
    records.append({"id": "xid-1", "type": "node.xid", "time": _at(60), "cluster": "c",
                    "scope": "gpu", "entity": "n1/gpu3", "node": "n1", "severity": "critical",
                    "attributes": {"xid": 79, "gpu": "3"}})
    records.append(_health(99, 5, node="n3"))
    events = _events(records)

    def run() -> tuple[list[IncidentEvent], Pipeline]:
        return _through(Pipeline(timedelta(seconds=30)), events)

    log, slow_p, _ = both(run)
    assert slow_p.reorder.reevaluations == 2
    revised = [e for e in log if e["kind"] == "diagnosis_revised"]
    assert revised and revised[-1]["data"]["class"] == "gpu_hardware", log
