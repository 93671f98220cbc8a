"""An attempt's GPUs as a fact with a source (issue 41, capability 1): precedence allocation >
request > topology whatever the arrival order, another attempt's count as a request, the
topology's count for a whole-node partition, and a revision through the incident's log when
a better source arrives past the lateness horizon."""

from __future__ import annotations

import hashlib
import itertools
from datetime import UTC, datetime, timedelta

from processors import gpus
from processors.attempts import JobRecord, evolve
from processors.incidents.model import fold
from processors.pipeline import Pipeline
from processors.topology import Topology
from schemas.events import Event, Source
from schemas.topology import TopologyFile
from tests.scenarios.library import LIBRARY, load, wiring

T0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)


def ev(type_: str, minute: float, attempt: int | None = 1, **attrs: object) -> Event:
    digest = hashlib.sha256(repr(sorted(attrs.items())).encode()).hexdigest()[:8]
    return Event(id=f"{type_}-{attempt}-{minute}-{digest}", type=type_,
                 source=Source.scheduler, time=T0 + timedelta(minutes=minute), project="p",
                 cluster="c", job_id="j", attempt=attempt, attributes=attrs)


def folded(events: list[Event]) -> JobRecord:
    job: JobRecord | None = None
    for e in events:
        job, _ = evolve(job, e)
    assert job is not None
    return job


def test_the_better_source_wins_in_any_order() -> None:
    said = [ev("job.submitted", 0, gpus=8, gpus_source="request:--gres=gpu:8 x 1 node"),
            ev("job.started", 1, nodes=["n1", "n2"], gpus=16,
               gpus_source="allocation:tres_alloc_str gres/gpu=16"),
            ev("job.started", 1.5, nodes=["n1", "n2"], gpus=24,
               gpus_source="topology:gpu allocates whole nodes, 12 GPUs x 2 nodes")]
    for order in itertools.permutations(said):
        attempt = folded(list(order)).attempts[1]
        assert (attempt.gpus, attempt.gpus_source) == (16, "allocation:tres_alloc_str gres/gpu=16")


def test_a_count_without_a_source_is_the_producer_s() -> None:
    attempt = folded([ev("job.started", 1, nodes=["n1"], gpus=8)]).attempts[1]
    assert (attempt.gpus, attempt.gpus_source) == (8, "allocation:job.started gpus")
    attempt = folded([ev("job.started", 1, nodes=["n1"], gpu_ids=["0", "1", "2"])]).attempts[1]
    assert (attempt.gpus, attempt.gpus_source) == (3, "allocation:3 GPU ids")
    attempt = folded([ev("job.submitted", 0, submit_line="sbatch -N 2 --gres=gpu:4 t.sh")
                      ]).attempts[1]
    assert (attempt.gpus, attempt.gpus_source) == (8, "request:--gres=gpu:4 x 2 nodes")
    assert folded([ev("job.started", 1, nodes=["n1"])]).attempts[1].gpus_source == ""


def test_another_attempt_s_count_is_a_request_in_either_order() -> None:
    """slurmctld's second allocation names no GPU; the first attempt's allocation (or the
    second's, arriving first) says what the job asked for."""
    first = ev("job.started", 1, nodes=["n1"], gpus=8,
               gpus_source="allocation:tres.allocated")
    rest = [ev("job.requeued", 30, reason="NODE_FAIL"), ev("job.started", 35, None,
                                                           nodes=["n2"])]
    for events in ([first, *rest], [*rest, first]):
        job = folded(events)
        assert (job.attempts[2].gpus, job.attempts[2].gpus_source) == (
            8, "request:attempt 1's (allocation:tres.allocated)"), events
        assert job.attempts[1].gpus_source == "allocation:tres.allocated"
    own = folded([first, *rest, ev("job.started", 35, 2, nodes=["n2"], gpus=4,
                                   gpus_source="allocation:tres.allocated")])
    assert (own.attempts[2].gpus, own.attempts[1].gpus) == (4, 8)


def test_a_whole_node_partition_gives_the_topology_s_count() -> None:
    topology = Topology.from_file(TopologyFile.model_validate({
        "cluster": "c", "partitions": {"gpu-large": {"whole_node": True}},
        "nodes": {"n1": {"gpus": 8}, "n2": {"gpus": 4}}}))
    start = ev("job.started", 1, None, nodes=["n1", "n2"], partition="gpu-large")
    got = gpus.whole_nodes(start, topology)
    assert (got.attributes["gpus"], got.attributes["gpus_source"]) == (
        12, "topology:gpu-large allocates whole nodes, their GPUs x 2 nodes")
    assert start.attributes.get("gpus") is None  # the stored event keeps what was said
    shared = ev("job.started", 1, None, nodes=["n1", "n2"], partition="gpu")
    assert gpus.whole_nodes(shared, topology) is shared
    unknown_node = ev("job.started", 1, None, nodes=["n1", "n9"], partition="gpu-large")
    assert gpus.whole_nodes(unknown_node, topology) is unknown_node
    said = ev("job.started", 1, None, nodes=["n1"], partition="gpu-large", gpus=2)
    assert gpus.whole_nodes(said, topology) is said
    assert gpus.whole_nodes(ev("job.started", 1, None, nodes=["n1"]), topology,
                            queue="gpu-large").attributes["gpus"] == 8


def test_preemption_that_requeued_opens_the_next_attempt() -> None:
    """slurmctld's `preempted JobId=N has been requeued ...` alone (its `Requeuing` line not
    shipped), and a start after an attempt ended, each open the next attempt: the start is
    never folded into the attempt it follows."""
    job = folded([ev("job.started", 0, None, nodes=["n1"]),
                  ev("job.preempted", 30, None, reason="PREEMPTED", requeued=True),
                  ev("job.started", 50, None, nodes=["n2"])])
    assert sorted(job.attempts) == [1, 2]
    assert (job.attempts[1].started_at, job.attempts[1].outcome) == (T0, "preempted")
    assert job.attempts[1].requeued_at == T0 + timedelta(minutes=30)
    assert job.attempts[2].started_at == T0 + timedelta(minutes=50)
    after = folded([ev("job.started", 0, 1, nodes=["n1"]),
                    ev("job.preempted", 30, 1, reason="PREEMPTED"),
                    ev("job.started", 50, None, nodes=["n2"])])
    assert sorted(after.attempts) == [1, 2] and after.attempts[1].started_at == T0


def test_a_better_source_past_the_horizon_revises_the_incident() -> None:
    """The story of gpus-revised-when-a-better-source-arrives, with the service's kind of
    horizon (30 s here): scontrol's and squeue's records come hours later, older than the
    horizon, so each is decided where it arrives: a `gpus_revised` from unknown to 2
    (request), then to the allocation (same count: not assessed again); the stale request
    of 8 changes nothing."""
    scenario = load(LIBRARY / "gpus-revised-when-a-better-source-arrives.yaml")
    pipeline = Pipeline(timedelta(seconds=30), wiring(scenario), lateness=timedelta(seconds=30),
                        rules=scenario.rules)
    log = [e for event in scenario.events for e in pipeline.process([event]).incidents]
    revised = [(e.data["previous"], e.data["gpus"], e.data["gpus_source"]) for e in log
               if e.kind == "gpus_revised"]
    assert revised == [(0, 2, "request:attempt 2's (request:TRES gres/gpu=2)"),
                       (2, 2, "allocation:tres_alloc_str gres/gpu=2")]
    assessed = [e.data["lost_gpu_hours"] for e in log if e.kind == "impact_assessed"]
    assert assessed == [0.0, 0.0, 0.041607, 0.041607]  # 2 x 74.893 s / 3600, again final
    (inc,) = [i for i in fold(log).values() if not i.withdrawn]
    job = inc.jobs["research/5/1"]
    assert (job.gpus, job.gpus_source, inc.loss_unknown) == (
        2, "allocation:tres_alloc_str gres/gpu=2", "")
    assert inc.lost_gpu_hours == 0.041607
