"""`jobtrail collect slurm` against a real Slurm 22.05 started by the tests (slurm_kit).

Every job lifecycle the scheduler has — complete, fail, cancel, admin requeue, time limit, a
node drained and then set down under a running job — must land on the job's timeline as the
right attempts, with the times sacct recorded. A collector SIGKILLed and restarted loses and
doubles nothing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from jobtrail.drill.shipper import TrainingLogShipper
from jobtrail.drill.workload import prepare
from jobtrail.store import Store
from tests.integration.slurm_kit import (
    ROOT,
    SLURMCTLD_LOG,
    attempts_in_sacct,
    collector,
    idle_cluster,
    job,
    sbatch,
    sh,
    slurm,
    wait_until,
)

__all__ = ["idle_cluster", "slurm"]
pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.usefixtures("idle_cluster")]
PROJECT = "root"  # the Slurm account of the submitting user


def _types(store: Store, job_id: str) -> list[tuple[int, str]]:
    return [(r["attempt"], r["type"]) for r in store.timeline(PROJECT, job_id)]


def _epoch(value: datetime | None) -> float:
    assert value is not None
    return value.replace(tzinfo=value.tzinfo or UTC).timestamp()


def _same_times_as_sacct(store: Store, job_id: str) -> None:
    """Each attempt's start and end are the ones sacct recorded (to its whole seconds; a
    requeue's log line can come ~1 s after the end accounting records)."""
    ours = store.attempts(PROJECT, job_id)
    theirs = [a for a in attempts_in_sacct(job_id) if a["time"]["start"]]
    assert [a.attempt for a in ours] == list(range(1, len(theirs) + 1)), (ours, theirs)
    for mine, record in zip(ours, theirs, strict=True):
        assert abs(_epoch(mine.started_at) - record["time"]["start"]) <= 1.0, (mine, record)
        if record["time"]["end"]:
            assert abs(_epoch(mine.ended_at) - record["time"]["end"]) <= 2.0, (mine, record)


def test_every_lifecycle_lands_on_the_timeline(slurm: Path, store: Store,
                                                tmp_path: Path) -> None:
    c = collector(store, tmp_path)
    # `ok` runs until the collector has recorded its start (its GPUs are read from the
    # running job: a 2-second job was over before a loaded machine's poll, by construction
    # now, not by timing); bounded: 300 s at most
    go = tmp_path / "go-ok"
    ok = sbatch(slurm, f"for i in $(seq 1 1500); do [ -e {go} ] && break; sleep 0.2; done; "
                "exit 0", "-x", "n3")
    bad = sbatch(slurm, "sleep 2; exit 3", "-x", "n3")
    cancel = sbatch(slurm, "sleep 300", "-x", "n3")
    requeue = sbatch(slurm, "sleep 300", "--requeue", "-w", "n2")
    limit = sbatch(slurm, "sleep 300", "--time=1", "-x", "n3")
    on_n3 = sbatch(slurm, "sleep 300", "--requeue", "-w", "n3")
    big = sbatch(slurm, "sleep 1", "--gres=gpu:8", "-w", "n4", "--dependency", f"afterany:{ok}")

    running = {ok, cancel, requeue, on_n3}
    wait_until("jobs running", lambda: all(job(j).get("job_state") == "RUNNING"
                                           for j in running), 60, c.step)
    wait_until("ok's start on its timeline", lambda: (1, "job.started") in _types(store, ok),
               60, c.step)
    pending = wait_until("a pending reason", lambda: [
        r for r in store.timeline(PROJECT, big) if r["type"] == "job.pending"], 30, c.step)
    assert pending[0]["attributes"]["reason"] == "Dependency"  # `ok` still runs: by construction
    go.touch()
    sh("scancel", cancel)
    sh("scontrol", "requeue", requeue)
    sh("scontrol", "update", "nodename=n3", "state=drain", "reason=XID 79: GPU fell off the bus")
    wait_until("the drain on the job's timeline", lambda: (1, "node.drained") in
               _types(store, on_n3), 30, c.step)
    sh("scontrol", "update", "nodename=n3", "state=down", "reason=IB link down mlx5_0")
    try:
        wait_until("the requeue on node failure", lambda: (1, "job.requeued") in
                   _types(store, on_n3), 30, c.step)
    finally:
        sh("scontrol", "update", "nodename=n3", "state=resume")  # the rerun needs n3 again
    outcomes = {"completed": (ok, (1, "job.completed")), "failed": (bad, (1, "job.failed")),
                "cancelled": (cancel, (1, "job.cancelled")),
                "requeued rerun": (requeue, (2, "job.started")),
                "node-fail rerun": (on_n3, (2, "job.started")),
                "time limit": (limit, (1, "job.timeout"))}

    def missing() -> list[str]:
        back = any(e.type == "node.ready" and e.node == "n3" for e in store.recent_events(900))
        return [k for k, (j, want) in outcomes.items() if want not in _types(store, j)] + (
            [] if back else ["n3 back"])

    wait_until("every outcome", lambda: not missing(), 180, c.step, poll_s=1.0,
               explain=missing)

    rows = {j: store.timeline(PROJECT, j) for j in (ok, bad, cancel, requeue, limit, on_n3)}
    by_type = {j: {(r["attempt"], r["type"]): r for r in rs} for j, rs in rows.items()}
    assert by_type[ok][(1, "job.completed")]["attributes"]["exit_code"] == 0
    assert by_type[bad][(1, "job.failed")]["attributes"]["exit_code"] == 3
    assert by_type[cancel][(1, "job.cancelled")]["attributes"]["signal"] == "SIGTERM"
    assert by_type[requeue][(1, "job.requeued")]["attributes"]["reason"] == "REQUEUED"
    assert by_type[limit][(1, "job.timeout")]["attributes"]["reason"] == "TIMEOUT"
    started = by_type[ok][(1, "job.started")]["attributes"]
    assert started["gpus"] == 2 and len(started["gpu_ids"]) == 2
    drained = by_type[on_n3][(1, "node.drained")]
    assert (drained["relation"], drained["node"]) == ("node", "n3")
    assert "XID 79" in drained["attributes"]["reason"]
    down = by_type[on_n3][(1, "node.not_ready")]
    assert "IB link down" in down["attributes"]["reason"]
    failed = by_type[on_n3][(1, "job.requeued")]["attributes"]
    assert (failed["reason"], failed["failed_nodes"]) == ("NODE_FAIL", ["n3"])
    for j in (ok, bad, cancel, requeue, limit, on_n3):
        _same_times_as_sacct(store, j)
    assert next(a.outcome for a in store.attempts(PROJECT, on_n3)) in ("requeued", "failed")
    assert store.duplicate_ids() == 0
    sh("scancel", requeue, on_n3, big)


def _cli(home: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBTRAIL_")}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([sys.executable, "-m", "jobtrail.cli", "--home", str(home), *args],
                          capture_output=True, text=True, timeout=300, cwd=ROOT, env=env,
                          check=False)
    assert not check or done.returncode == 0, done.stderr[-3000:]
    return done


def _collector(home: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBTRAIL_")}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.Popen([sys.executable, "-m", "jobtrail.cli", "--home", str(home),
                             "collect", "slurm", "--log", str(SLURMCTLD_LOG), "--interval",
                             "0.3"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


_DUMP = """
import json, os, sys
from jobtrail.app import open_store
from jobtrail.config import Settings
store = open_store(Settings.from_env({"JOBTRAIL_HOME": sys.argv[1]}))
rows = store._dicts("SELECT id, job_id, attempt, type FROM events FINAL WHERE job_id != ''")
print(json.dumps(rows))
"""


def _ids(home: Path, jobs: list[str]) -> dict[str, list[tuple[int, str, str]]]:
    """(attempt, type, id) of each job's events in a home (one subprocess: chDB opens one
    path per process, and this one holds the test store's)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBTRAIL_")}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([sys.executable, "-c", _DUMP, str(home)], capture_output=True,
                          text=True, timeout=300, cwd=ROOT, env=env, check=True)
    rows: list[dict[str, Any]] = json.loads(done.stdout)
    return {j: sorted((r["attempt"], r["type"], r["id"]) for r in rows if r["job_id"] == j)
            for j in jobs}


def test_sigkill_and_restart_lose_and_double_nothing(slurm: Path, tmp_path: Path) -> None:
    home, reference = tmp_path / "home", tmp_path / "reference"
    proc = _collector(home)
    jobs = [sbatch(slurm, f"sleep {1 + i % 3}; exit {i % 2}", "-x", "n3") for i in range(6)]
    requeued = sbatch(slurm, "sleep 300", "--requeue", "-x", "n3")
    try:
        wait_until("jobs under way", lambda: job(requeued).get("job_state") == "RUNNING", 60)
        proc.send_signal(signal.SIGKILL)  # mid-stream, cursor possibly behind what was sent
        proc.wait(30)
        sh("scontrol", "requeue", requeued)
        proc = _collector(home)
        wait_until("the rerun", lambda: job(requeued).get("restart_cnt") == 1
                   and job(requeued).get("job_state") == "RUNNING", 90)
        wait_until("all done", lambda: all(job(j).get("job_state") in ("COMPLETED", "FAILED")
                                           for j in jobs), 60)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        cursor = home / "collect/slurm-cursor.json"
        before = cursor.stat().st_mtime_ns
        proc = _collector(home)
        wait_until("the restarted collector caught up", lambda: cursor.stat().st_mtime_ns
                   != before and json.loads(cursor.read_text())["log_offset"]
                   >= SLURMCTLD_LOG.stat().st_size, 60)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        sh("scancel", requeued)
    _cli(reference, "collect", "slurm", "--log", str(SLURMCTLD_LOG), "--max-steps", "1")
    got, want = _ids(home, [*jobs, requeued]), _ids(reference, [*jobs, requeued])
    for j in jobs:
        assert want[j], j
        assert set(want[j]) <= set(got[j]), (j, got[j], want[j])  # 0 lost
    kinds = [(j, a, t) for j, rows in got.items() for a, t, _ in rows
             if t != "job.pending"]
    assert len(kinds) == len(set(kinds)), kinds  # 0 doubled: one event per attempt and kind
    assert {(a, t) for a, t, _ in got[requeued]} >= {(1, "job.started"), (1, "job.requeued"),
                                                     (2, "job.started")}
    stats = json.loads(_cli(home, "stats").stdout)
    assert stats["duplicate_event_ids"] == 0


def _sacct_task(array: str, task: int) -> dict[str, Any]:
    """sacct's record of one array task (its own job id; `array.job_id`, `array.task_id`)."""
    def found() -> list[dict[str, Any]]:
        records = json.loads(sh("sacct", "--json", "-j", array))["jobs"]
        return [r for r in records if r["array"]["job_id"] == int(array)
                and r["array"]["task_id"] == task and r["time"]["end"]]

    # slurmctld hands accounting to slurmdbd asynchronously: the task's ended record can
    # land after squeue showed it done (a loaded machine); bounded
    [record] = wait_until(f"sacct's ended record of {array}_{task}", found, 60, explain=lambda: [
        (r["array"], r["time"]) for r in json.loads(sh("sacct", "--json", "-j", array))["jobs"]])
    return record


def test_array_tasks_get_their_start_and_nodes(slurm: Path, store: Store,
                                               tmp_path: Path) -> None:
    """A 3-task array: each task `<array>_<task>` (the name squeue and slurmctld's log use)
    has its `job.started` with the node sacct recorded, at sacct's start, and its GPUs."""
    c = collector(store, tmp_path)
    go = tmp_path / "go-array"
    array = sbatch(slurm, f"for i in $(seq 1 1500); do [ -e {go} ] && break; sleep 0.2; done",
                   "--array=0-2", "-x", "n3")
    tasks = [f"{array}_{t}" for t in range(3)]

    def started() -> list[str]:
        return [t for t in tasks if (1, "job.started") not in _types(store, t)]

    try:
        wait_until("every task's start on its timeline", lambda: not started(), 90, c.step,
                   explain=started)
        go.touch()
        wait_until("every task's end", lambda: all(
            (1, "job.completed") in _types(store, t) for t in tasks), 90, c.step)
    finally:
        go.touch()
    for number, task in enumerate(tasks):
        record = _sacct_task(array, number)
        [start] = [r for r in store.timeline(PROJECT, task) if r["type"] == "job.started"]
        assert start["attributes"]["nodes"] == [record["nodes"]], (start, record)
        assert abs(_epoch(start["time"]) - record["time"]["start"]) <= 1.0
        assert start["attributes"]["gpus"] == 2
        [attempt] = store.attempts(PROJECT, task)
        assert list(attempt.nodes) == [record["nodes"]] and attempt.gpus == 2
        assert abs(_epoch(attempt.ended_at) - record["time"]["end"]) <= 2.0
    assert store.duplicate_ids() == 0


def test_a_node_down_charges_the_real_gpus_of_the_job(slurm: Path, store: Store,
                                                      tmp_path: Path) -> None:
    """Issue 41: a training job on 2 nodes x 8 GPUs (the drill's workload: it logs steps and
    checkpoints, shipped with the job and attempt), one node set DOWN under it. The incident
    holds the attempt with sacct's 16 GPUs (AllocTRES gres/gpu) and charges GPU-hours > 0,
    exactly 16 x the charged time, whose ends are sacct's own times: the failure at the
    NODE_FAIL attempt's end, the restart at the rerun's start."""
    c = collector(store, tmp_path)
    run_dir = slurm / f"gpus-{tmp_path.name}"
    launcher = prepare(run_dir)
    shipper = TrainingLogShipper(c.sink, run_dir, project=PROJECT, cluster="dev",
                                 job_id=lambda: big, drill_id="")
    big = sh("sbatch", "--parsable", "--requeue", "-N", "2", "--gres=gpu:8", "-w", "n[3-4]",
             f"--output={run_dir}/slurm-%j.out", str(launcher), str(run_dir), "200", "5",
             "0.25").strip().split(";")[0]

    def tick() -> None:
        c.step()
        shipper.step()

    def steps(attempt: int) -> list[int]:
        return [r["attributes"]["step"] for r in store.timeline(PROJECT, big)
                if r["type"] == "job.step" and r["attempt"] == attempt]

    def charged() -> dict[str, Any] | None:
        for row in store.incidents(None):
            for held in (store.incident(row["incident_id"], None) or {}).get("jobs", []):
                if (held["job_id"], held["attempt"]) == (big, 1) and held["lost_gpu_hours"] \
                        and held["verified_at"] is not None:
                    return held  # type: ignore[no-any-return]
        return None

    try:
        wait_until("a checkpoint and progress past it", lambda: max(steps(1), default=0) > 7,
                   90, tick)
        sh("scontrol", "update", "nodename=n4", "state=down", "reason=jobtrail test: PSU")
        try:
            wait_until("the requeue on node failure", lambda: (1, "job.requeued") in
                       _types(store, big), 60, tick)
        finally:
            sh("scontrol", "update", "nodename=n4", "state=resume")
        held = wait_until("the incident's charge, recovery verified", charged, 180, tick)
    finally:
        sh("scancel", big)
    first, rerun = attempts_in_sacct(big)[:2]
    gres = [t for t in first["tres"]["allocated"] if (t["type"], t["name"]) == ("gres", "gpu")]
    assert [t["count"] for t in gres] == [16]  # what Slurm itself allocated
    assert first["state"]["current"] == "NODE_FAIL"
    assert held["gpus"] == 16
    phases = held["rework_s"] + held["downtime_s"] + held["restore_s"]
    assert held["lost_gpu_hours"] > 0
    assert held["lost_gpu_hours"] == pytest.approx(16 * phases / 3600, abs=1e-5)
    # the charged interval's ends are sacct's: the failure, the restart, the wait between
    assert abs(_epoch(held["failed_at"]) - first["time"]["end"]) <= 2.0
    assert abs(_epoch(held["restarted_at"]) - rerun["time"]["start"]) <= 1.0
    assert held["downtime_s"] + held["queue_s"] == pytest.approx(
        rerun["time"]["start"] - first["time"]["end"], abs=2.0)
