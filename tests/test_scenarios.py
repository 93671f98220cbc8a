"""Scenario files through the embedded runtime (and, in tests/integration, through Faust)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from ingest.canonical import decode
from jobtrail.learn import sample
from jobtrail.runtime.embedded import EmbeddedLog, EmbeddedRunner
from jobtrail.runtime.sink import Sink
from jobtrail.store import Store
from processors.pipeline import Pipeline
from processors.topology import Topology
from schemas.topology import TopologyFile
from tests.conftest import OBSERVED
from tests.scenarios.runner import attributed, load


def test_fabric_scenario_embedded(store: Store, tmp_path: Path) -> None:
    scenario = load("fabric")
    wiring = Topology.from_file(TopologyFile.model_validate(sample.topology()))
    runner = EmbeddedRunner(Sink(store, Pipeline(timedelta(seconds=10), wiring)),
                            EmbeddedLog(tmp_path / "log"), batch_size=1)  # arrival order
    runner.submit(decode(scenario.jsonl(), producer="scenario", observed_at=OBSERVED))
    result = runner.drain()
    assert result.duplicates == 1 and not result.dead_letters
    rows = {job: store.timeline(scenario.project, job) for job in scenario.jobs}
    assert attributed(rows) == scenario.expect
