"""The embedded runtime end to end: the sample scenario, redelivery and a SIGKILL mid-drain."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
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

JOBTRAIL = [sys.executable, "-m", "jobtrail.cli"]


def _runner(store: Store, tmp_path: Path) -> EmbeddedRunner:
    wiring = Topology.from_file(TopologyFile.model_validate(sample.topology()))
    sink = Sink(store, Pipeline(timedelta(seconds=30), wiring))
    sink.restore()
    return EmbeddedRunner(sink, EmbeddedLog(tmp_path / "log"), batch_size=50)


def test_sample_timeline_shows_all_five_sources(store: Store, tmp_path: Path) -> None:
    runner = _runner(store, tmp_path)
    runner.submit(decode(sample.jsonl(), producer="sample", observed_at=OBSERVED))
    result = runner.drain()
    assert (result.received, result.stored, len(result.dead_letters)) == (167, 166, 1)
    assert result.dead_letters[0].field == "attributes.step"
    rows = store.timeline(sample.PROJECT, sample.JOB)
    assert {r["source"] for r in rows} == {"scheduler", "network", "storage", "node", "job"}
    by_type = {(r["type"], r["relation"], r["attempt"]) for r in rows}
    assert ("network.port_down", "nic", 1) in by_type
    assert ("network.link_errors", "nic", 1) in by_type  # switch-side, through the topology
    assert ("storage.latency", "target", 1) in by_type
    assert ("node.xid", "gpu", 1) in by_type
    # node-100 and nfs-home never belonged to the job: stored, not on its timeline
    assert not any(r["entity"] in ("node-100", "nfs-home") for r in rows)
    assert store.count("events") == 166
    attempts = store.attempts(sample.PROJECT, sample.JOB)
    assert [(a.attempt, a.state, len(a.nodes), a.gpus) for a in attempts] == [
        (1, "failed", 64, 512), (2, "completed", 64, 512)]
    assert attempts[0].queue_wait_s == 720.0 and "node-041" not in attempts[1].nodes
    # the leaked credential was redacted before storage
    leaked = [r for r in rows if "WANDB_API_KEY" in r["message"]]
    assert leaked and "abc123secretvalue7" not in leaked[0]["message"]


def test_reingest_and_restart_do_not_duplicate(store: Store, tmp_path: Path) -> None:
    records = decode(sample.jsonl(), producer="sample", observed_at=OBSERVED)
    runner = _runner(store, tmp_path)
    runner.submit(records)
    runner.drain()
    counts = {t: store.count(t, final=False) for t in ("events", "job_timeline", "dead_letters")}
    restarted = _runner(store, tmp_path)
    restarted.submit(records)
    again = restarted.drain()
    assert (again.stored, again.duplicates) == (0, 166)
    assert {t: store.count(t, final=False) for t in counts} == counts
    assert store.count("job_attempts") == 2


def _stats(home: Path) -> dict[str, object]:
    out = subprocess.run([*JOBTRAIL, "--home", str(home), "stats"], capture_output=True,
                         text=True, timeout=120, check=True)
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def test_sigkill_mid_drain_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    n = 30_000
    data = tmp_path / "load.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in sample.synthetic(n)) + "\n")
    home = tmp_path / "home"
    env = {**os.environ, "JOBTRAIL_BATCH_SIZE": "500"}
    proc = subprocess.Popen([*JOBTRAIL, "--home", str(home), "ingest", str(data)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    log = EmbeddedLog(home / "log")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if 0 < log.committed < n:  # mid-stream: some batches stored, most not
            break
        time.sleep(0.02)
    assert proc.poll() is None, "ingest finished before it could be killed; raise n"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    committed = log.committed
    assert 0 < committed < n
    subprocess.run([*JOBTRAIL, "--home", str(home), "drain"], env=env, check=True,
                   capture_output=True, timeout=300)
    stats = _stats(home)
    assert stats["duplicate_event_ids"] == 0
    assert stats["raw"]["events"] == stats["final"]["events"] == n  # type: ignore[index]
    # every job event, and every ECC event on a job's node, lands on a timeline exactly once
    assert stats["final"]["job_timeline"] == n  # type: ignore[index]
