"""Membership, fabric and data-path queries on the sample scenario (chDB and a server)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from ingest.canonical import decode
from jobtrail.learn import sample
from jobtrail.runtime.embedded import EmbeddedLog, EmbeddedRunner
from jobtrail.runtime.sink import Sink
from jobtrail.store import Store
from jobtrail.store.queries import attempts_under, resources, wiring
from processors.pipeline import Pipeline
from processors.topology import Topology
from schemas.events import Event, Source
from schemas.topology import TopologyFile
from tests.conftest import OBSERVED


@pytest.fixture
def store(backend_store: Store) -> Store:
    """This module is the store contract: it runs on chDB and on a server."""
    return backend_store


P = [sample.PROJECT]
DURING_1 = sample.T0 + timedelta(minutes=30)
DURING_2 = sample.T0 + timedelta(minutes=70)


def _topology() -> Topology:
    return Topology.from_file(TopologyFile.model_validate(sample.topology()))


@pytest.fixture
def loaded(store: Store, tmp_path: Path) -> Store:
    runner = EmbeddedRunner(Sink(store, Pipeline(topology=_topology())),
                            EmbeddedLog(tmp_path / "log"))
    runner.submit(decode(sample.jsonl(), producer="sample", observed_at=OBSERVED))
    runner.drain()
    return store


def _names(attempts: list) -> list[tuple[str, int]]:  # type: ignore[type-arg]
    return [(a.job_id, a.attempt) for a in attempts]


def test_which_attempts_were_on_a_node_at_a_time(loaded: Store) -> None:
    t = _topology()
    assert _names(attempts_under(loaded, t, P, DURING_1, node="node-041")) == [(sample.JOB, 1)]
    assert attempts_under(loaded, t, P, DURING_2, node="node-041") == []
    assert _names(attempts_under(loaded, t, P, DURING_2, node="node-065")) == [(sample.JOB, 2)]
    assert attempts_under(loaded, t, ["other-project"], DURING_1, node="node-041") == []


def test_which_attempts_were_under_a_switch_or_on_a_filesystem(loaded: Store) -> None:
    t = _topology()
    assert _names(attempts_under(loaded, t, P, DURING_1, switch="leaf-05")) == [(sample.JOB, 1)]
    assert _names(attempts_under(loaded, t, P, DURING_2, switch="spine-02")) == [(sample.JOB, 2)]
    assert _names(attempts_under(loaded, t, P, DURING_2, filesystem="lustre-scratch")) == [
        (sample.JOB, 2)]
    assert attempts_under(loaded, t, P, DURING_2, filesystem="nfs-home") == []
    assert attempts_under(loaded, t, P, sample.T0, switch="leaf-05") == []  # still pending


def test_resources_of_an_attempt(loaded: Store) -> None:
    found = resources(loaded, _topology(), sample.PROJECT, sample.JOB, 1)
    assert found is not None
    assert found.attempt.nodes[0] == "node-001" and len(found.attempt.nodes) == 64
    assert found.switches == [f"leaf-0{i}" for i in range(1, 9)] + ["spine-01", "spine-02"]
    assert "node-041/mlx5_0 → leaf-05/p9" in found.links
    assert found.filesystems == ["ckpt-store", "lustre-scratch"]
    assert [(c["type"], c["step"]) for c in found.checkpoints] == [
        ("checkpoint.saved", s) for s in (500, 1000, 1500, 2000)]
    second = resources(loaded, _topology(), sample.PROJECT, sample.JOB, 2)
    assert second is not None and second.checkpoints[0]["type"] == "checkpoint.restored"
    assert resources(loaded, _topology(), "other", sample.JOB, 1) is None


def test_entity_timeline_is_project_bound(loaded: Store) -> None:
    mine = loaded.entity_timeline(P, "node-041")
    types = [r["type"] for r in mine]
    assert {"node.ecc", "network.port_down", "node.xid", "node.drained",
            "job.worker_exited", "comm.nccl_timeout"} <= set(types)
    theirs = loaded.entity_timeline(["other"], "node-041")
    assert {r["project"] for r in theirs} == {""}
    assert "job.worker_exited" not in [r["type"] for r in theirs]
    assert [r["type"] for r in loaded.entity_timeline(P, "leaf-05")] == [
        "network.link_errors", "network.port_down"]


def test_entity_timeline_shows_a_replayed_event_once(loaded: Store) -> None:
    """A crash between a batch's inserts and its ids leaves an event stored twice, byte for
    byte; the entity timeline reads without FINAL and must still show it once."""
    before = loaded.entity_timeline(P, "leaf-05")
    again = [e for e in loaded.events_by_id([r["id"] for r in before]).values()]
    loaded.client.raw_insert(f"{loaded.database}.events", insert_block="\n".join(
        e.to_json() for e in again).encode(), fmt="JSONEachRow",
        settings={"input_format_json_read_objects_as_strings": 1,
                  "date_time_input_format": "best_effort"})
    assert loaded.count("events", final=False) > loaded.count("events")
    assert loaded.entity_timeline(P, "leaf-05") == before
    # a switch named only inside the attributes is still found, and only that switch
    assert loaded.entity_timeline(P, "leaf-0") == []


def test_stored_cable_moves_change_the_wiring(loaded: Store) -> None:
    moved = Event(id="mv1", type="topology.link", source=Source.topology,
                  time=sample.T0 + timedelta(minutes=20), cluster=sample.CLUSTER,
                  attributes={"node": "node-041", "nic": "mlx5_0", "switch": "leaf-01",
                              "port": "p17"})
    Sink(loaded, Pipeline()).handle([moved])
    t = wiring(loaded, _topology())
    assert "leaf-05" in t.switches_of("node-041", sample.T0 + timedelta(minutes=10))
    assert "leaf-05" not in t.switches_of("node-041", DURING_1)
    assert _names(attempts_under(loaded, t, P, DURING_1, switch="leaf-01")) == [(sample.JOB, 1)]
