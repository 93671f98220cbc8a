"""Two clusters that reuse node names and share a partition never share membership, signals
or incidents (issue 32, "many clusters").

`east` and `west` both have `node-001`. A job runs on east's `node-001`; west's `node-001`
(idle) reports a fatal Xid, then east's reports one too. What an SRE must see: west's Xid on
no timeline, east's job impacted only by east's incident, and no incident holding evidence of
both clusters. The embedded runtime runs it here, also across a rebuild from the store and a
snapshot; `tests/integration/test_many_clusters.py` runs the same records through the Kafka
worker (both clusters on one partition). The mechanism: `Sink` holds one pipeline per cluster.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ingest.canonical import decode
from jobtrail.runtime.embedded import EmbeddedLog, EmbeddedRunner
from jobtrail.runtime.sink import Sink
from jobtrail.runtime.snapshot import adopt, dumps, loads
from jobtrail.store import Store
from processors.pipeline import Pipeline
from tests.conftest import OBSERVED

T0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
PROJECT = "shared"
XIDS = {"east": "east-xid-node-001", "west": "west-xid-node-001"}


def _iso(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


def records() -> list[dict[str, Any]]:
    """East runs `east-1` on its node-001..004; west runs `west-1` on node-101..104 and
    leaves its own node-001 idle. Both node-001s lose a GPU (Xid 79), west's first."""
    out: list[dict[str, Any]] = []
    for cluster, job, first in (("east", "east-1", 1), ("west", "west-1", 101)):
        nodes = [f"node-{n:03d}" for n in range(first, first + 4)]
        out.append({"id": f"{job}-start", "type": "job.started", "time": _iso(T0),
                    "project": PROJECT, "cluster": cluster, "job_id": job, "attempt": 1,
                    "attributes": {"nodes": nodes, "gpus": 32}})
        for minute in range(1, 15):
            out.append({"id": f"{job}-step-{minute}", "type": "job.step",
                        "time": _iso(T0 + timedelta(minutes=minute)), "project": PROJECT,
                        "cluster": cluster, "job_id": job, "attempt": 1,
                        "attributes": {"step": minute * 10, "step_time_s": 6.0}})
    for cluster, minute in (("west", 10), ("east", 11)):
        out.append({"id": XIDS[cluster], "type": "node.xid", "source": "node",
                    "severity": "critical", "time": _iso(T0 + timedelta(minutes=minute)),
                    "cluster": cluster, "scope": "gpu", "entity": "node-001/gpu0",
                    "node": "node-001", "attributes": {"xid": 79, "gpu": "0"}})
    return sorted(out, key=lambda r: (r["time"], r["id"]))


def jsonl() -> str:
    return "\n".join(json.dumps(r) for r in records())


def check(store: Store) -> None:
    """What both runtimes must show."""
    east = {r["event_id"] for r in store.timeline(PROJECT, "east-1")}
    west = {r["event_id"] for r in store.timeline(PROJECT, "west-1")}
    assert XIDS["east"] in east
    assert XIDS["west"] not in east | west  # west's node-001 ran nothing
    evidence = store._dicts("SELECT incident_id, groupUniqArray(event_id) AS ids "
                            "FROM incident_evidence FINAL GROUP BY incident_id")
    for row in evidence:
        assert not {XIDS["east"], XIDS["west"]} <= set(row["ids"]), row
    holding = {row["incident_id"] for row in evidence if XIDS["west"] in row["ids"]}
    impacted = store._dicts("SELECT DISTINCT incident_id, job_id FROM incident_jobs FINAL")
    assert not [r for r in impacted if r["incident_id"] in holding and r["job_id"]], impacted
    # ... and they can be told apart (issue 41, item 10): each incident says its cluster,
    # in its row and its title; `entity` and `where` take the cluster
    told = {(r["cluster"], r["title"]) for r in store._dicts(
        "SELECT cluster, title FROM incidents FINAL WHERE class = 'gpu_hardware'")}
    assert told == {("east", "gpu hardware on node-001/gpu0 in east"),
                    ("west", "gpu hardware on node-001/gpu0 in west")}
    for cluster in ("east", "west"):
        rows = store.entity_timeline([PROJECT], "node-001", cluster=cluster)
        assert {(r["id"], r["cluster"]) for r in rows} == {(XIDS[cluster], cluster)}
    assert {r["id"] for r in store.entity_timeline([PROJECT], "node-001")} == set(XIDS.values())
    at = T0 + timedelta(minutes=5)
    assert [a.job_id for a in store.attempts_at([PROJECT], at, nodes=["node-001"],
                                                cluster="east")] == ["east-1"]
    assert store.attempts_at([PROJECT], at, nodes=["node-001"], cluster="west") == []


def _runner(store: Store, log: Path) -> EmbeddedRunner:
    sink = Sink(store, Pipeline(timedelta(seconds=30)))
    sink.restore()
    return EmbeddedRunner(sink, EmbeddedLog(log), batch_size=7)


def test_two_clusters_with_the_same_node_names_stay_apart_embedded(
        store: Store, tmp_path: Path) -> None:
    runner = _runner(store, tmp_path / "log")
    runner.submit(decode(jsonl(), producer="test", observed_at=OBSERVED))
    result = runner.drain()
    assert (result.stored, len(result.dead_letters)) == (len(records()), 0)
    assert sorted(runner.sink.clusters) == ["east", "west"]
    check(store)


@pytest.mark.parametrize("how", ["store", "snapshot"])
def test_clusters_stay_apart_across_a_restart(store: Store, tmp_path: Path, how: str) -> None:
    """Half the records, a restart (rebuilt from the store, or from a snapshot), the rest."""
    events = decode(jsonl(), producer="test", observed_at=OBSERVED)
    half = next(i for i, e in enumerate(events) if e.id == XIDS["west"]) + 1
    first = _runner(store, tmp_path / "log")
    first.submit(events[:half])
    first.drain()
    body = dumps(first.sink.pipeline, {"test": half}, first.sink.clusters)
    second = _runner(store, tmp_path / "log")  # the same log, from its committed offset
    if how == "snapshot":
        snapshot, problem = loads(body, "test")
        assert snapshot is not None, problem
        adopt(second.sink, snapshot)
    assert len(second.sink.pipelines()) == 2
    second.submit(events[half:])
    second.drain()
    check(store)
