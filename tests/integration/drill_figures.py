"""Detection and recovery times per drill kind over several runs, on the real Slurm
(`scripts/slurm-up.sh`, stopped at the end):

    PYTHONPATH=. .venv/bin/python -m tests.integration.drill_figures 3 [KIND ...]

Prints one JSON line per drill (`DrillReport.figures()`) and a Markdown table of each kind's
times (min-max over the runs): injection -> first symptom received (scheduler/workload),
-> incident (detection), symptom -> incident (jobtrail), -> the rerun's start, -> a step past
the failure step (recovered). `node-down (requeue=0)` is the unrequeueable job's resubmit path.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from jobtrail.collect.sinks import RuntimeSink
from jobtrail.collect.slurm import SlurmCollector
from jobtrail.drill.run import Drill, Options
from jobtrail.runtime.embedded import EmbeddedLog, EmbeddedRunner
from jobtrail.runtime.sink import Sink
from jobtrail.store import Store
from processors.pipeline import Pipeline
from processors.topology import Topology
from tests.integration.slurm_kit import ROOT, SLURMCTLD_LOG

KINDS = ("kill-worker", "node-down", "checkpoint-unwritable", "network-partition",
         "node-down (requeue=0)")
FIELDS = ("scheduler_s", "detection_s", "jobtrail_s", "restart_s", "recovery_s")


def one(kind: str, store: Store, tmp: Path, work: Path) -> dict[str, Any]:
    sink = Sink(store, Pipeline(timedelta(seconds=30), Topology()))
    sink.restore()
    runner = EmbeddedRunner(sink, EmbeddedLog(tmp / "log"), batch_size=500)
    out = RuntimeSink(runner)
    collector = SlurmCollector(out, tmp / "cursor.json", log_path=SLURMCTLD_LOG)
    collector.step()
    name, requeue = (kind.split(" ")[0], "requeue=0" not in kind)
    wait = 40 if name == "checkpoint-unwritable" else 120
    report = Drill(Options(name, work, steps=40, checkpoint_every=5, pace_s=0.25,
                           timeout_s=wait, requeue=requeue),
                   sink=out, store=store, collector=collector, command=runner.command,
                   project="root", cluster=collector.cluster).run()
    subprocess.run(["scontrol", "update", "nodename=n[1-4]", "state=resume"],
                   capture_output=True, check=False)
    figures = {**report.figures(), "kind": kind,
               "failed": [c.name for c in report.checks if not c.passed]}
    print(json.dumps(figures), flush=True)
    return figures


def span(values: list[float | None]) -> str:
    got = [v for v in values if v is not None]
    if not got:
        return "n/a"
    return f"{min(got):.1f}" if min(got) == max(got) else f"{min(got):.1f}-{max(got):.1f}"


def main(argv: list[str]) -> None:
    runs = int(argv[0]) if argv else 3
    kinds = argv[1:] or list(KINDS)
    env = dict(os.environ)
    subprocess.run(["bash", str(ROOT / "scripts/slurm-down.sh")], env=env, capture_output=True,
                   check=False)
    subprocess.run(["bash", str(ROOT / "scripts/slurm-up.sh")], env=env, check=True,
                   capture_output=True)
    base = Path(tempfile.mkdtemp(prefix="jt-drill-figures-"))
    work = Path(env.get("JT_LIVE") or "/tmp/jt-live") / f"figures-{os.getpid()}"
    work.mkdir(parents=True, exist_ok=True)
    work.chmod(0o777)
    results: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
    try:
        for i in range(runs):
            for kind in kinds:
                tmp = base / f"{kind.split(' ')[0]}-{len(kind)}-{i}"
                tmp.mkdir(parents=True)
                store = Store.connect(f"chdb://{base}/chdb", f"d_{uuid.uuid4().hex[:10]}")
                store.migrate()
                results[kind].append(one(kind, store, tmp, work))
    finally:
        subprocess.run(["bash", str(ROOT / "scripts/slurm-down.sh")], env=env,
                       capture_output=True, check=False)
    print("\n| kind | runs | passed | symptom received (s) | detection (s) | jobtrail (s) | "
          "rerun started (s) | recovered (s) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for kind, rows in results.items():
        print(f"| {kind} | {len(rows)} | {sum(r['passed'] for r in rows)} | "
              + " | ".join(span([r[f] for r in rows]) for f in FIELDS) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
