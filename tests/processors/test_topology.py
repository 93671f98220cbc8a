"""Attribution through the fabric, written from DESIGN §6 failure classes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from processors.pipeline import Pipeline
from processors.topology import Topology
from schemas.events import Event, Scope, Source
from schemas.topology import TopologyFile, fat_tree

T0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)


def topo() -> Topology:
    # 64 nodes, 2 rails, 16 nodes per leaf: node-001..016 on leaf-01 (rail 0) and leaf-02
    return Topology.from_file(TopologyFile.model_validate(fat_tree(64)))


def nodes(a: int, b: int) -> list[str]:
    return [f"node-{i:03d}" for i in range(a, b + 1)]


def start(job: str, minute: float, members: list[str], mounts: list[str] | None = None,
          attempt: int = 1) -> Event:
    return Event(id=f"{job}-start-{attempt}", type="job.started", source=Source.scheduler,
                 time=T0 + timedelta(minutes=minute), project="p", cluster="c", job_id=job,
                 attempt=attempt, attributes={"nodes": members, "mounts": mounts or []})


def infra(id_: str, type_: str, minute: float, scope: Scope, entity: str,
          node: str | None = None, source: Source = Source.network, **attrs: object) -> Event:
    return Event(id=id_, type=type_, source=source, time=T0 + timedelta(minutes=minute),
                 cluster="c", scope=scope, entity=entity, node=node, attributes=attrs)


def three_jobs(p: Pipeline) -> None:
    p.process([
        start("a", 0, nodes(1, 4), ["lustre-scratch:/a"]),
        start("b", 0, nodes(10, 12), ["nfs-home:/b"]),
        start("c", 0, nodes(20, 24), ["lustre-scratch:/c"]),
    ])


def summary(rows: list) -> list[tuple[str, str, str]]:  # type: ignore[type-arg]
    return [(r.job_id, r.relation, r.link_path) for r in rows]


def test_port_flap_under_a_leaf_reaches_only_jobs_under_that_leaf() -> None:
    p = Pipeline(topology=topo())
    three_jobs(p)
    out = p.process([infra("f1", "network.port_down", 5, Scope.port, "leaf-01/p2"),
                     infra("f2", "network.port_up", 5.1, Scope.port, "leaf-01/p2")])
    assert summary(out.timeline) == [
        ("a", "nic", "leaf-01/p2 → node-002"), ("b", "switch", "leaf-01 → node-010"),
        ("a", "nic", "leaf-01/p2 → node-002"), ("b", "switch", "leaf-01 → node-010")]


def test_stalled_target_reaches_every_job_mounting_its_filesystem() -> None:
    p = Pipeline(topology=topo())
    three_jobs(p)
    out = p.process([infra("s1", "storage.latency", 5, Scope.target, "OST0007",
                           source=Source.storage, latency_ms=4000.0)])
    assert summary(out.timeline) == [("a", "target", "OST0007 → lustre-scratch"),
                                     ("c", "target", "OST0007 → lustre-scratch")]


def test_event_arriving_before_the_start_event_is_attributed_when_it_arrives() -> None:
    p = Pipeline(topology=topo(), slack=timedelta(seconds=10))
    early = p.process([infra("x1", "node.xid", 1, Scope.gpu, "node-003/gpu2", "node-003",
                             Source.node, xid=79)])
    assert early.timeline == []
    later = p.process([start("a", 0.5, nodes(1, 4))])
    assert summary([r for r in later.timeline if r.relation != "self"]) == [
        ("a", "gpu", "node-003/gpu2 → node-003")]
    # redelivery of the start event does not attribute the waiting event twice
    again = p.process([start("a", 0.5, nodes(1, 4))]).timeline
    assert [r.relation for r in again] == ["self"]


def test_event_before_the_attempt_started_is_not_attributed() -> None:
    p = Pipeline(topology=topo(), slack=timedelta(seconds=10))
    p.process([infra("x1", "node.xid", 0, Scope.node, "node-003", source=Source.node, xid=79)])
    out = p.process([start("a", 0.5, nodes(1, 4))])
    assert [r.relation for r in out.timeline] == ["self"]


def test_event_later_than_the_lateness_window_is_not_reattributed() -> None:
    p = Pipeline(topology=topo(), lateness=timedelta(minutes=10))
    p.process([infra("x1", "node.ecc", 5, Scope.node, "node-003", source=Source.node)])
    p.process([infra("x2", "node.ecc", 30, Scope.node, "node-900", source=Source.node)])
    out = p.process([start("a", 0, nodes(1, 4))])
    assert [r.relation for r in out.timeline] == ["self"]


def test_node_moved_to_another_switch_mid_day() -> None:
    p = Pipeline(topology=topo())
    p.process([start("a", 0, nodes(1, 4))])
    move = Event(id="mv", type="topology.link", source=Source.topology,
                 time=T0 + timedelta(hours=1), cluster="c",
                 attributes={"node": "node-002", "nic": "mlx5_0", "switch": "leaf-03",
                             "port": "p30"})
    before = p.process([infra("d1", "network.port_down", 30, Scope.port, "leaf-01/p2")])
    p.process([move])
    after_old = p.process([infra("d2", "network.port_down", 120, Scope.port, "leaf-01/p2")])
    after_new = p.process([infra("d3", "network.port_down", 120, Scope.port, "leaf-03/p30")])
    assert summary(before.timeline) == [("a", "nic", "leaf-01/p2 → node-002")]
    # node-001, 003, 004 are still under leaf-01; node-002 now hangs off leaf-03/p30
    assert summary(after_old.timeline) == [("a", "switch", "leaf-01 → node-001")]
    assert summary(after_new.timeline) == [("a", "nic", "leaf-03/p30 → node-002")]
    # the wiring is versioned: a question about 08:30 still sees the old cable
    assert p.topology.switches_of("node-002", T0 + timedelta(minutes=30)) >= {"leaf-01"}
    assert "leaf-01" not in p.topology.switches_of("node-002", T0 + timedelta(hours=2))


def test_spine_event_reaches_every_job_on_its_rail() -> None:
    p = Pipeline(topology=topo())
    three_jobs(p)
    out = p.process([infra("sp", "network.link_errors", 5, Scope.switch, "spine-01")])
    assert summary(out.timeline) == [("a", "switch", "spine-01 → leaf-01 → node-001"),
                                     ("b", "switch", "spine-01 → leaf-01 → node-010"),
                                     ("c", "switch", "spine-01 → leaf-03 → node-020")]


def test_change_events_are_attributed_as_changes() -> None:
    p = Pipeline(topology=topo())
    three_jobs(p)
    out = p.process([
        infra("ch1", "change.applied", 5, Scope.node, "node-011", source=Source.change,
              kind="driver", before="550.54", after="550.90"),
        infra("ch2", "change.applied", 6, Scope.switch, "leaf-03", source=Source.change,
              kind="switch_config"),
    ])
    assert summary(out.timeline) == [("b", "change", "node-011"),
                                     ("c", "change", "leaf-03 → node-020")]


def test_queue_events_reach_waiting_and_running_attempts_of_that_queue() -> None:
    p = Pipeline(topology=topo())
    submitted = Event(id="sub", type="job.submitted", source=Source.scheduler, time=T0,
                      project="p", cluster="c", job_id="w", attributes={"queue": "gpu-large"})
    p.process([submitted, start("a", 0, nodes(1, 2))])
    out = p.process([infra("q1", "change.applied", 5, Scope.queue, "gpu-large",
                           source=Source.change, kind="scheduler_policy"),
                     infra("q2", "operator.note", 6, Scope.queue, "gpu-large",
                           source=Source.operator),
                     infra("q3", "operator.note", 6, Scope.queue, "gpu-small",
                           source=Source.operator)])
    assert summary(out.timeline) == [("w", "change", "gpu-large → w"),
                                     ("w", "queue", "gpu-large → w")]


def test_a_lustre_clients_target_and_an_hca_port_take_the_topologys_names() -> None:
    """One thing, one name, whatever source spoke of it: a Lustre client's `scratch-OST0012`
    is the target OST0012 of the topology's `lustre-scratch` (its incident is OST0012's, its
    jobs reached through the mount), and ibstat's HCA port
    `node-003/mlx5_0/1` is the NIC `node-003/mlx5_0` the topology cables to leaf-01. The
    spelling read stays in the attributes; names the topology does not know are kept."""
    p = Pipeline(topology=topo())
    three_jobs(p)
    client = infra("c1", "storage.io_error", 5, Scope.target, "scratch-OST0012", "node-002",
                   Source.storage, target="OST0012", fsname="scratch", error="EIO")
    named = p.entity_named(client)
    assert (named.entity, named.attributes["filesystem"], named.attributes["fsname"]) == (
        "OST0012", "lustre-scratch", "scratch")
    out = p.process([client])
    assert sorted((r.job_id, r.relation, r.entity) for r in out.timeline) == [
        ("a", "client", "OST0012"), ("c", "target", "OST0012")]
    opened = [e.data for e in out.incidents if e.kind == "opened"]
    assert [(d["entity"], d["key"]) for d in opened] == [("OST0012", "storage:lustre-scratch")]
    unknown = infra("c2", "storage.io_error", 5, Scope.target, "work-OST0012", "node-002",
                    Source.storage, target="OST0012", fsname="work", error="EIO")
    assert p.entity_named(unknown).entity == "work-OST0012"  # another filesystem's OST0012
    port = infra("n1", "network.port_down", 6, Scope.nic, "node-003/mlx5_0/1", "node-003",
                 port="mlx5_0/1")
    assert (p.entity_named(port).entity, p.entity_named(port).attributes["port"]) == (
        "node-003/mlx5_0", "mlx5_0/1")
    other = infra("n2", "network.port_down", 6, Scope.nic, "node-003/ib7/1", "node-003")
    assert p.entity_named(other).entity == "node-003/ib7/1"


def test_a_target_two_filesystems_hold_keeps_the_name_it_was_given() -> None:
    spec = fat_tree(16)
    spec["filesystems"] = {"lustre-scratch": {"kind": "lustre", "targets": ["OST0001"]},
                           "scratch-b": {"kind": "lustre", "targets": ["OST0001"]}}
    p = Pipeline(topology=Topology.from_file(TopologyFile.model_validate(spec)))
    event = infra("c1", "storage.io_error", 5, Scope.target, "scratch-OST0001", "node-002",
                  Source.storage, target="OST0001", fsname="scratch")
    assert p.entity_named(event).entity == "scratch-OST0001"  # ambiguous: as read
