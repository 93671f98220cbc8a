"""Jobs that fail at the same instant on different nodes, each under its own fault, are
independent failures: one incident per faulty entity (a node's GPU, a node, a leaf port),
each with its own job's impact and loss, whatever the order the events arrive in (time
order, ties in any order, files imported one source after another), and the store's
projections written batch by batch are those a replay of the log gives."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.stories import HORIZON, PROJECT, T0, Story, answer, node, port, wiring
from processors.incidents.model import Incident, IncidentEvent
from processors.pipeline import Pipeline
from schemas.events import Event
from tests.processors.incident_kit import replayed, stored

CLASSES = ("gpu_hardware", "node_failure", "network")
OWNER = {"gpu_hardware": "hardware-ops", "node_failure": "hardware-ops", "network": "network"}
Answer = tuple[tuple[str, str, str, tuple[str, ...], float, str], ...]
"""(class, entity, owner, impacted attempts, lost GPU-h, recovery) per incident."""
GPUS = 16  # two nodes a job
LOST = round(GPUS * (20 * 60 + 5 * 60) / 3600, 3)
"""Checkpoint at 10m, failed at 20m+gap, restarted at 30m, resumed at 35m: GPUs x (rework
(10m + gap) + downtime (10m - gap) + restore 5m) - the gap cancels out."""


def _at(minutes: float, seconds: float = 0) -> timedelta:
    return timedelta(minutes=minutes, seconds=seconds)


def _fault(story: Story, klass: str, n: int) -> str:
    """The fault on node n at 20m; returns the incident's entity."""
    if klass == "gpu_hardware":
        entity = f"{node(n)}/gpu0"
        story.add(f"dmesg:{node(n)}", "node.xid", T0 + _at(20), scope="gpu", entity=entity,
                  node=node(n), attributes={"xid": 79, "gpu": "0"})
    elif klass == "node_failure":
        entity = node(n)
        story.add("slurmctld", "node.not_ready", T0 + _at(20), scope="node", entity=entity,
                  node=entity, attributes={"reason": "Not responding"})
    else:
        entity = port(n)
        story.add("fabric", "network.port_down", T0 + _at(20), scope="port", entity=entity)
    return entity


def same_instant(klass: str, firsts: list[int], gap: int) -> tuple[Story, Answer]:
    """A two-node job from each node number in `firsts` (its restart 8 nodes on), all
    failing at 20m + `gap` s, each under a fault on its first node at 20m; and the answer
    an SRE would write down."""
    story = Story(0, klass, klass)
    truth: list[tuple[str, str, str, tuple[str, ...], float, str]] = []
    for n in firsts:
        job = f"job-{n}"
        for attempt, first, at in ((1, n, _at(0)), (2, n + 8, _at(30))):
            story.add("slurmctld", "job.started", T0 + at, job_id=job, attempt=attempt,
                      attributes={"nodes": [node(first), node(first + 1)], "gpus": GPUS})
        story.add("training", "checkpoint.saved", T0 + _at(10), job_id=job, attempt=1,
                  attributes={"step": 100, "path": f"/ckpt/{job}/100"})
        story.add("training", "job.step", T0 + _at(18), job_id=job, attempt=1,
                  entity="rank-0", attributes={"step": 180})
        entity = _fault(story, klass, n)
        failed = T0 + _at(20, gap)
        if klass == "gpu_hardware":
            story.add("ranks", "job.worker_exited", failed, job_id=job, attempt=1,
                      node=node(n), attributes={"rank": 0, "exit_code": 1})
        else:
            story.add("ranks", "comm.nccl_timeout", failed, job_id=job, attempt=1,
                      node=node(n), attributes={"rank": 0})
        story.add("slurmctld", "job.failed", failed, job_id=job, attempt=1,
                  attributes={"exit_code": 1})
        story.add("slurmctld", "job.requeued", failed + timedelta(seconds=3), job_id=job,
                  attempt=1)
        story.add("training", "checkpoint.restored", T0 + _at(32), job_id=job, attempt=2,
                  attributes={"step": 100})
        for minutes, step in ((35, 101), (50, 190)):
            story.add("training", "job.step", T0 + _at(minutes), job_id=job, attempt=2,
                      entity="rank-0", attributes={"step": step})
        truth.append((klass, entity, OWNER[klass], (f"{PROJECT}/{job}/1",), LOST,
                      "verified"))
    return story, tuple(sorted(truth))


@st.composite
def delivered(draw: st.DrawFn) -> tuple[Answer, list[Event]]:
    """A same-instant story and an arrival order: time order with the ties (every job's
    events at the same instants) in any order, or one source's file after another."""
    klass = draw(st.sampled_from(CLASSES))
    if klass != "network" and draw(st.booleans()):  # under one leaf: still a node each
        firsts = draw(st.lists(st.sampled_from((1, 3, 5, 7)), min_size=2, max_size=4,
                               unique=True))
    else:  # a rack, so a leaf, each (ports on one leaf are one network incident)
        firsts = [16 * r + 1 for r in draw(st.lists(st.integers(0, 3), min_size=2,
                                                    max_size=4, unique=True))]
    story, truth = same_instant(klass, sorted(firsts), draw(st.integers(0, 5)))
    events = story.events
    if draw(st.booleans()):
        ties = draw(st.permutations(range(len(events))))
        order = sorted(range(len(events)), key=lambda i: (events[i][1].time, ties[i]))
        return truth, [events[i][1] for i in order]
    sources = draw(st.permutations(sorted({s for s, _ in events})))
    return truth, [e for s in sources for source, e in events if source == s]


def _answer(log: list[IncidentEvent]) -> Answer:
    """The engine's conclusions without the cluster (these stories have one)."""
    return tuple((a[0], a[1], a[2], a[3], a[4], a[5]) for a in answer(log))


def _run(events: list[Event]) -> list[IncidentEvent]:
    """One event a batch; after each, the store holds what a replay of the log gives."""
    pipeline = Pipeline(timedelta(seconds=30), wiring(), lateness=HORIZON)
    log: list[IncidentEvent] = []
    batches: list[tuple[list[Incident], list[IncidentEvent]]] = []
    for event in events:
        out = pipeline.process([event])
        batches.append((out.incident_states, out.incidents))
        log += out.incidents
        assert stored(batches) == replayed(log), f"the store after {event.type} {event.id}"
    return log


def test_two_gpus_failing_at_the_same_second_in_both_delivery_orders() -> None:
    """Xid 79 on node-001 under job-1 and on node-033 under job-33, both jobs failing 2 s
    later: delivered in time order (the same instant's events job by job) and one source's
    file after another."""
    story, truth = same_instant("gpu_hardware", [1, 33], 2)
    in_time = [e for _, e in sorted(story.events, key=lambda se: se[1].time)]
    files = [e for s in sorted({s for s, _ in story.events})
             for source, e in story.events if source == s]
    for events in (in_time, files):
        log = _run(events)
        assert _answer(log) == truth


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(delivered())
def test_same_instant_failures_stay_apart_in_any_arrival_order(
        case: tuple[Answer, list[Event]]) -> None:
    truth, events = case
    log = _run(events)
    assert _answer(log) == truth
