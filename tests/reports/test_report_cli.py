"""`jobtrail report` on the sample scenario, run as a user would (a subprocess per command)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from jobtrail.learn import sample

ROOT = Path(__file__).resolve().parents[2]


def _run(home: Path, *args: str, stdin: str | None = None,
         env: dict[str, str] | None = None) -> str:
    done = subprocess.run([sys.executable, "-m", "jobtrail.cli", "--home", str(home), *args],
                          capture_output=True, text=True, input=stdin, timeout=300,
                          cwd=ROOT, env={**os.environ, **(env or {})})
    assert done.returncode == 0, (args, done.stderr[-300:])
    return done.stdout


def test_reports_on_the_sample(tmp_path: Path) -> None:
    topo = tmp_path / "topology.yaml"
    topo.write_text(yaml.safe_dump(sample.topology()))
    env = {"JOBTRAIL_TOPOLOGY": str(topo), "JOBTRAIL_RETENTION_INCIDENTS_DAYS": "400"}
    home = tmp_path / "home"
    _run(home, "ingest", "-", stdin=_run(home, "sample-events"), env=env)
    good = _run(home, "report", "goodput", "job-7b-001", "--project", "llm-pretrain", env=env)
    assert "Wall time 5610 s, ETTR 0.7415, failures 1." in good
    out = tmp_path / "capacity.md"
    _run(home, "report", "capacity", "--project", "llm-pretrain", "--since",
         "2026-11-30T00:00:00Z", "--until", "2026-12-01T00:00:00Z", "--out", str(out), env=env)
    report = out.read_text()
    # attempt 1: "Resources" 08:00:05-08:06:00 with all 64 nodes free (355 s x 512 GPUs:
    # other, 50.5), "Priority" 08:06-08:12 (51.2); attempt 2: "Resources" 08:58:20-09:01:30
    # needing all 64 nodes while node-041 is drained (190 s x 512: nodes down, 27.0)
    assert "Jobs waited 128.7 GPU-hours; the biggest constraint is **priority** " \
           "(51.2 GPU-hours, 40%)." in report
    assert "| gpu-large | llm-pretrain | 0.0 | 0.0 | 0.0 | 0.0 | 51.2 | 27.0 | 0.0 | 50.5 |" \
        in report
    assert "Nodes down behind the waits: incidents inc-3d87dc18a9775365." in report
    # the sample applies no change: the report says so with its header only
    changes = _run(home, "report", "changes", "--project", "llm-pretrain", "--since",
                   "2026-11-30T00:00:00Z", "--until", "2026-12-01T00:00:00Z", env=env)
    assert changes.startswith("# Changes 2026-11-30 to 2026-12-01") and "| 20" not in changes
    text = _run(home, "report", "retention", env=env)
    assert "incidents: 400 days" in text and "raw_events: kept forever" in text
