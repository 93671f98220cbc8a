"""Why jobs waited, on a hand-built week: four 8-GPU nodes (n1, n2 under leaf-1; n3, n4
under leaf-2) and six waits whose causes and GPU-hours are computed by hand below."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from jobtrail.reports import capacity as cap

T0 = datetime(2026, 11, 23, tzinfo=UTC)  # a Monday


def h(hours: float) -> datetime:
    return T0 + timedelta(hours=hours)


CLUSTER = cap.Cluster(
    nodes={"n1": cap.Node(8, "leaf-1"), "n2": cap.Node(8, "leaf-1"),
           "n3": cap.Node(8, "leaf-2"), "n4": cap.Node(8, "leaf-2")},
    allocations=[cap.Allocation("n1", 4, h(0), h(10)), cap.Allocation("n3", 4, h(0), h(10)),
                 cap.Allocation("n2", 8, h(0), h(2.5)), cap.Allocation("n4", 8, h(0), h(1))],
    outages=[cap.Outage("n2", h(2.5), h(3.5), "inc-n2-xid79")])


def wait(project: str, job: str, reason: str, start: float, end: float, gpus: int,
         per_node: int, one_leaf: bool = False) -> cap.Wait:
    return cap.Wait(project, "gpu", job, 1, reason, h(start), h(end), gpus, per_node, one_leaf)


WAITS = [
    # 2x8 GPUs. [0,1): free n1 4 + n3 4 = 8 < 16: capacity, 16 GPU-h.
    # [1,2.5): n4 freed: 16 free but one node with 8: fragmentation 1 - 8/16, 24 GPU-h.
    # [2.5,3.5): n2 freed but drained: it would fit on n2+n4: nodes down, 16 GPU-h.
    wait("p1", "j1", "Resources", 0, 3.5, 16, 8),
    # 3x4 on one leaf, [1,2): n1, n3, n4 fit across leaves, no leaf has 3: topology, 12.
    wait("p2", "j2", "Resources", 1, 2, 12, 4, one_leaf=True),
    wait("p2", "j3", "Priority", 0, 1, 8, 8),              # priority, 8
    wait("p1", "j4", "QOSMaxGRESPerUser", 0, 1, 8, 8),     # quota, 8
    wait("p2", "j5", "ContainerCreating", 0, 0.5, 4, 4),   # pulls, 2
]


def test_fragmentation_against_a_hand_computation() -> None:
    f = cap.fit({"a": 8, "b": 4, "c": 4, "d": 3, "e": 2, "f": 0, "g": 8, "h": 5}, 8, 3)
    # 34 free; two nodes hold a whole 8-GPU slot: 16 usable; 3x8 does not fit
    assert (f.free, f.usable, f.fits) == (34, 16, False)
    assert f.fragmentation == pytest.approx(1 - 16 / 34)  # 0.5294
    assert cap.fit({"a": 8, "b": 4, "c": 4}, 4, 3) == cap.Fit(16, 16, True)


def test_waiting_gpu_hours_by_cause_and_the_biggest_constraint() -> None:
    slices = cap.attribute(CLUSTER, WAITS)
    assert [(s.wait.job_id, s.cause, s.gpu_hours, s.incidents) for s in slices] == [
        ("j1", "capacity", 16, ()), ("j1", "fragmentation", 24, ()),
        ("j1", "nodes_down", 16, ("inc-n2-xid79",)), ("j2", "topology", 12, ()),
        ("j3", "priority", 8, ()), ("j4", "quota", 8, ()), ("j5", "pulls", 2, ())]
    assert slices[1].fragmentation == 0.5
    table = cap.summary(slices)
    assert {k: {c: v for c, v in row.items() if v} for k, row in table.items()} == {
        ("gpu", "p1"): {"capacity": 16, "fragmentation": 24, "nodes_down": 16, "quota": 8},
        ("gpu", "p2"): {"topology": 12, "priority": 8, "pulls": 2}}
    assert cap.biggest(slices) == ("fragmentation", 24)
    text = cap.markdown(slices, title="Capacity, week of 2026-11-23")
    assert "Jobs waited 86.0 GPU-hours; the biggest constraint is **fragmentation** " \
           "(24.0 GPU-hours, 28%)." in text
    assert "| gpu | p1 | 16.0 | 24.0 | 0.0 | 8.0 | 0.0 | 16.0 | 0.0 | 0.0 |" in text
    assert "j1 50% of free GPUs unusable for 2x8" in text
    assert "incidents inc-n2-xid79" in text
