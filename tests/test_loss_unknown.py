"""A loss no source can count is shown as unknown, with the reason, never as 0.0 GPU-hours
(issue 41, capability 1): through the real CLI and store, on the live Slurm's own lines.
slurmctld names no GPU; once `squeue --json` (which does) is imported, the same surfaces
show the counted loss and its source."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JOBTRAIL = [sys.executable, "-m", "jobtrail.cli"]
SCENARIO = ROOT / "tests/scenarios/incidents/slurmd-killed-gpus-from-squeue-json.yaml"


def _run(home: Path, *args: str, stdin: str | None = None) -> str:
    return subprocess.run([*JOBTRAIL, "--home", str(home), *args], capture_output=True,
                          text=True, input=stdin, timeout=300, check=True, cwd=ROOT).stdout


def _raw(adapter: str) -> str:
    import yaml

    events = yaml.safe_load(SCENARIO.read_text())["events"]
    (item,) = [e for e in events if e.get("raw") == adapter]
    return str(item["text"])


def _steps() -> str:
    lines = []
    for attempt, seconds, step in ((1, 9, 1), (1, 12, 4), (2, 83, 1), (2, 87, 5)):
        lines.append(json.dumps({
            "id": f"step-{attempt}-{step}", "type": "job.step", "source": "job",
            "time": f"2026-12-06T01:0{(50 + seconds) // 60 + 5}:{(50 + seconds) % 60:02d}Z",
            "project": "research", "cluster": "dev", "job_id": "5", "attempt": attempt,
            "attributes": {"step": step}}))
    return "\n".join(lines) + "\n"


def test_unknown_gpus_read_as_unknown_then_counted(tmp_path: Path) -> None:
    home = tmp_path / "home"
    _run(home, "ingest", "-", "--format", "slurmctld", "--project", "research",
         "--cluster", "dev", stdin=_raw("slurmctld"))
    _run(home, "ingest", "-", stdin=_steps())
    listed = [json.loads(line) for line in _run(home, "incidents", "--json").splitlines()]
    (row,) = [r for r in listed if r["class"] == "node_failure"]
    assert row["lost_gpu_hours"] is None
    assert row["loss_unknown"].startswith("GPUs unknown for research/5/1: no source gave")
    table = _run(home, "incidents")
    assert "unknown" in table and "0.00" not in table.split("\n", 1)[1]
    shown = _run(home, "incident", "show", row["incident_id"])
    assert "1 jobs, unknown GPUs, unknown GPU-hours and 4 steps lost" in shown
    assert "loss unknown: GPUs unknown for research/5/1" in shown
    assert "(failed): unknown GPUs" in shown and "unknown GPU-h" in shown
    full = json.loads(_run(home, "incident", "show", row["incident_id"], "--json"))
    (job,) = full["jobs"]
    assert (job["gpus"], job["gpus_source"], job["lost_gpu_hours"]) == (None, "", None)
    assert full["impacted_gpus"] is None
    assert job["rework_s"] > 0  # the time lost is measured; only the GPU count is missing
    _run(home, "postmortem", "draft", row["incident_id"])
    postmortem = _run(home, "postmortem", "show", row["incident_id"])
    assert "job 5 (GPUs unknown) failed at 01:06" in postmortem
    assert "the GPU-hours lost are unknown: no source said the attempt's GPUs" in postmortem
    assert "- Lost GPU-hours: unknown = " in postmortem
    assert "- Loss unknown: GPUs unknown for research/5/1" in postmortem
    # squeue --json, polled while the job ran, says gres/gpu=2: the loss is counted
    _run(home, "ingest", "-", "--format", "slurm", "--project", "research", "--cluster", "dev",
         stdin=_raw("slurm"))
    full = json.loads(_run(home, "incident", "show", row["incident_id"], "--json"))
    (job,) = full["jobs"]
    assert (job["gpus"], job["gpus_source"]) == (2, "allocation:tres_alloc_str gres/gpu=2")
    assert full["loss_unknown"] == "" and full["lost_gpu_hours"] == 0.041667
    shown = _run(home, "incident", "show", row["incident_id"])
    assert "0.04 GPU-hours" in shown and "(GPUs: allocation:tres_alloc_str" in shown
