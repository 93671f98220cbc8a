"""Goodput on the sample scenario (job-7b-001: 512 GPUs, an Xid 79 on node-041 kills
attempt 1 at step 2250, attempt 2 restores step 2000 and completes at 3500): the split adds
up to the wall time exactly, and each figure is the hand computation in the comments."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ingest.canonical import decode
from jobtrail.learn import sample
from jobtrail.reports import goodput
from jobtrail.runtime.embedded import EmbeddedLog, EmbeddedRunner
from jobtrail.runtime.sink import Sink
from jobtrail.store import Store
from processors.attempts import Attempt
from processors.pipeline import Pipeline
from processors.topology import Topology
from schemas.topology import TopologyFile
from tests.conftest import OBSERVED


@pytest.fixture
def loaded(store: Store, tmp_path: Path) -> Store:
    topology = Topology.from_file(TopologyFile.model_validate(sample.topology()))
    runner = EmbeddedRunner(Sink(store, Pipeline(topology=topology)),
                            EmbeddedLog(tmp_path / "log"))
    runner.submit(decode(sample.jsonl(), producer="sample", observed_at=OBSERVED))
    runner.drain()
    return store


def test_the_split_adds_up_to_the_wall_time(loaded: Store) -> None:
    g = goodput.load(loaded, sample.PROJECT, sample.JOB)
    # submitted 08:00:00, attempt 2 completed 09:33:30
    assert g.wall_s == 5610
    assert g.seconds == {
        "queue": 720,          # 08:00:00 -> started 08:12:00
        "restore": 180,        # 08:12:00 -> first step 08:13:00; 09:01:30 -> 09:03:30
        "productive": 4160,    # 2760 - 60 - 340 in attempt 1; 1920 - 120 in attempt 2
        "thrown_away": 340,    # checkpoint 2000 saved 08:52:20 -> failed 08:58:00
        "degraded": 0,         # every step at its 1.2 s median
        "held_wait": 210,      # 08:58:00 -> attempt 2 started 09:01:30, pending on
        "requeue_wait": 0,     # "Resources": a restart waiting with its allocation held
    }
    assert sum(g.seconds.values()) == g.wall_s
    assert g.ettr == pytest.approx(4160 / 5610)
    assert g.gpu_hours["productive"] == pytest.approx(512 * 4160 / 3600, abs=1e-6)
    one, two = g.attempts
    assert (one.outcome, two.outcome) == ("failed", "completed")
    assert one.failure_cost_gpu_hours == pytest.approx(512 * (340 + 210 + 120) / 3600,
                                                       abs=1e-6)  # 95.289
    assert two.failure_cost_gpu_hours == 0
    # one failure in 2760 + 1920 s of run; saves every 600 s costing 41.5 s each
    assert (g.failures, g.mtbf_s, g.checkpoint_cost_s, g.checkpoint_interval_s) == \
        (1, 4680, 41.5, 600)
    assert g.young_interval_s == pytest.approx((2 * 41.5 * 4680) ** 0.5)  # 623.2 s
    assert g.daly_interval_s == pytest.approx((2 * 41.5 * 4680) ** 0.5 - 41.5)
    costs = goodput.incident_costs(loaded, sample.PROJECT, sample.JOB)
    assert [(c["attempt"], c["role"]) for c in costs] == [(1, "failed")]
    # the same loss the incident counted (the corrected rule: rework + held wait + restore)
    assert costs[0]["lost_gpu_hours"] == pytest.approx(one.failure_cost_gpu_hours, abs=1e-5)
    text = goodput.markdown(g, costs)
    assert "| thrown_away | 340.0 | 6.06% | 48.356 |" in text
    assert "Young's interval is 623 s, Daly's 582 s" in text


def test_checkpoints_name_their_model_and_data_and_nodes_their_mtbi(loaded: Store) -> None:
    held = goodput.checkpoints(loaded, sample.PROJECT, model_version="7b-v3")
    assert [(c["attempt"], c["step"]) for c in held] == [
        (1, 500), (1, 1000), (1, 1500), (1, 2000), (2, 2500), (2, 3000), (2, 3500)]
    assert {c["data_version"] for c in held} == {"web-2026-10"}
    assert goodput.checkpoints(loaded, "other-project", model_version="7b-v3") == []
    day = datetime(2026, 11, 30, tzinfo=UTC)
    lemons = goodput.node_mtbi(loaded, [sample.PROJECT], day, day + timedelta(days=1))
    # node-100's Xid incident is the only one on a node (the job's cause is leaf-05/p9)
    assert lemons == [{"node": "node-100", "incidents": 1, "mtbi_hours": 24.0}]
    assert goodput.node_mtbi(loaded, [sample.PROJECT], day + timedelta(days=1),
                             day + timedelta(days=2)) == []


def test_fail_slow_time_is_its_own_bucket() -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)

    def step(s: int, at: int, st: float = 1.0) -> dict[str, object]:
        return {"time": t0 + timedelta(seconds=at), "attempt": 1, "type": "job.step",
                "attributes": {"step": s, "step_time_s": st}}

    a = Attempt(project="p", cluster="c", job_id="j", attempt=1, outcome="completed",
                submitted_at=t0, started_at=t0 + timedelta(seconds=10),
                ended_at=t0 + timedelta(seconds=200), gpus=8)
    # 100 steps of 1 s each, but 10..110 took 150 s: 50 s fail-slow
    rows = [step(10, 20), step(60, 70), step(110, 170, 3.0), step(160, 200)]
    g = goodput.split("p", "j", [a], rows)
    assert g.seconds == {"queue": 10, "restore": 10, "productive": 130, "thrown_away": 0,
                         "degraded": 50, "held_wait": 0, "requeue_wait": 0}
    assert sum(g.seconds.values()) == g.wall_s == 200


def test_the_fleet_panels_show_the_same_figures(loaded: Store) -> None:
    from dashboards import fleet
    from dashboards.check import expand

    start, end = sample.T0 - timedelta(hours=1), sample.T0 + timedelta(hours=4)

    def rows(sql: str) -> list[dict[str, object]]:
        result = loaded.client.query(expand(sql, {}, start, end, 60))
        return [dict(zip(result.column_names, r, strict=True)) for r in result.result_rows]

    # Resources 355 s + 190 s and Priority 360 s, at 512 GPUs
    assert {(r["queue"], r["cause"]): r["waiting_gpu_hours"] for r in rows(fleet.WAITING)} \
        == {("gpu-large", "resources"): 77.51, ("gpu-large", "priority"): 51.2}
    (good,) = rows(fleet.GOODPUT)
    assert good["run_gpu_hours"] == 665.6  # 512 x (2760 + 1920) s
    costs = goodput.incident_costs(loaded, sample.PROJECT, sample.JOB)
    assert good["failure_gpu_hours"] == round(costs[0]["lost_gpu_hours"], 2)
    assert rows(fleet.MTBI) == [{"node": "node-100", "incidents": 1, "mtbi_hours": 5.0}]
