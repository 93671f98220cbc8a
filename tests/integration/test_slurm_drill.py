"""`jobtrail drill run` end to end against the real Slurm the tests start: a worker killed, the
job's node set down, and its checkpoint storage cut (recovery in place fails: the drill stops,
cleans up and resubmits). Each drill must pass every check from jobtrail's own timeline and
incident, mark its incident as a drill, and write its report."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from jobtrail.collect.sinks import RuntimeSink
from jobtrail.collect.slurm import SlurmCollector
from jobtrail.drill.report import DrillReport
from jobtrail.drill.run import Drill, Options
from jobtrail.runtime.embedded import EmbeddedLog, EmbeddedRunner
from jobtrail.runtime.sink import Sink
from jobtrail.store import Store
from processors.pipeline import Pipeline
from processors.topology import Topology
from tests.integration.slurm_kit import SLURMCTLD_LOG, sh, slurm

__all__ = ["slurm"]
pytestmark = [pytest.mark.slurm, pytest.mark.slow]


@pytest.mark.parametrize("kind", ["kill-worker", "node-down", "checkpoint-unwritable"])
def test_drill_passes_every_check(kind: str, slurm: Path, store: Store,
                                  tmp_path: Path) -> None:
    sink = Sink(store, Pipeline(timedelta(seconds=30), Topology()))
    sink.restore()
    runner = EmbeddedRunner(sink, EmbeddedLog(tmp_path / "log"), batch_size=500)
    out = RuntimeSink(runner)
    collector = SlurmCollector(out, tmp_path / "cursor.json", log_path=SLURMCTLD_LOG)
    collector.step()
    # checkpoint-unwritable cannot recover in place: a short wait before stop/clean/resubmit
    wait = 40 if kind == "checkpoint-unwritable" else 120
    drill = Drill(Options(kind, slurm / "drills", steps=40, checkpoint_every=5, pace_s=0.25,
                          timeout_s=wait), sink=out, store=store, collector=collector,
                  command=runner.command, project="root", cluster=collector.cluster)
    try:
        report = drill.run()
    finally:
        sh("scontrol", "update", "nodename=n[1-4]", "state=resume") if kind == "node-down" \
            and "down" in sh("sinfo", "-h", "-o", "%t") else None
    print(report.to_markdown())  # the figures, with `pytest -s`
    # the 10 s goal is a figure the report measures, not a condition this test can make
    # happen on a loaded machine: every other check must pass
    timed = "incident within 10 s of the first symptom received"
    failed = [c for c in report.checks if not c.passed and c.name != timed]
    assert not failed, report.to_markdown()
    assert report.detection_s is not None and report.jobtrail_s is not None
    assert [c.name for c in report.checks].count(timed) == 1
    assert all(c.evidence for c in report.checks if c.name not in (
        "incident within 10 s of the first symptom received", "lost GPU time"))
    log = store.incident(report.incident_id, None)
    assert log is not None
    assert any(e["kind"] == "note_added" and e["data"]["text"].startswith("[drill]")
               for e in log["log"])
    assert any(e["kind"] == "signal_added" and e["data"].get("flag") == "drill"
               for e in log["log"])  # flagged as the fault was processed: pages nobody
    if kind == "checkpoint-unwritable":
        assert "resubmitted as job" in report.recovery_path
        assert report.notes and "stop, clean up, resubmit" in report.notes[0]
    else:
        assert report.recovery_path.startswith("Slurm requeued")
    path = report.save(tmp_path / "reports")
    again = DrillReport.from_json(path.read_text())
    assert again.passed and json.loads(path.read_text())["passed"] is True
    assert "| last checkpoint restored | pass |" in path.with_suffix(".md").read_text()
