"""The path a person takes with the CLI: one file per source, `jobtrail ingest` one after
another into the embedded store, in an order that is not the events' time order. The store
then holds the incidents the events give in time order (the import's lateness horizon)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jobtrail.learn.scenarios import library, load, topology
from tests.processors.test_incident_library import _answer

JOBTRAIL = [sys.executable, "-m", "jobtrail.cli"]
STORY = "two-gpus-fail-at-the-same-second"


def _run(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([*JOBTRAIL, *args], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.mark.parametrize("lateness", [None, "600"])
def test_files_imported_job_log_first_give_the_time_ordered_incidents(
        tmp_path: Path, lateness: str | None) -> None:
    """Job log first, then the node's, then the scheduler's: with the import's default
    horizon the store holds the two GPU incidents, each with its job and loss; a service's
    10-minute horizon (set explicitly) decides each file where it arrived and cannot."""
    (path,) = [p for p in library() if p.stem == STORY]
    scenario = load(path)
    events = sorted(scenario.events, key=lambda e: (e.time, e.id))
    wiring = tmp_path / "topology.json"
    wiring.write_text(json.dumps(topology(scenario)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBTRAIL_")}
    env.update(JOBTRAIL_HOME=str(tmp_path / "home"), JOBTRAIL_TOPOLOGY=str(wiring))
    if lateness is not None:
        env["JOBTRAIL_LATENESS_S"] = lateness
    for source in ("job", "node", "scheduler"):
        file = tmp_path / f"{source}.jsonl"
        file.write_text("".join(e.model_dump_json() + "\n" for e in events
                                if e.source.value == source))
        _run(env, "ingest", str(file))
    rows = [json.loads(line) for line in _run(env, "incidents", "--all", "--json").splitlines()]
    stored = sorted((r["class"], r["entity"], round(r["lost_gpu_hours"], 2)) for r in rows
                    if "withdrawn" not in r.get("flags", []))
    in_time = sorted((klass, entity, loss) for klass, entity, _, loss, _ in
                     _answer(scenario, events))
    assert [c for c, _, _ in in_time] == ["gpu_hardware", "gpu_hardware"]
    if lateness is None:
        assert stored == in_time
    else:
        assert stored != in_time


def test_the_import_horizon_yields_to_an_operator_setting() -> None:
    from jobtrail.config import Settings

    assert not Settings.from_env({}).lateness_given
    assert not Settings.from_env({"JOBTRAIL_LATENESS_S": ""}).lateness_given  # unset
    given = Settings.from_env({"JOBTRAIL_LATENESS_S": "900"})
    assert given.lateness_given and given.lateness_s == 900


def test_a_job_log_without_its_cluster_joins_the_job_s_cluster(tmp_path: Path) -> None:
    """The scheduler's events say cluster `c`; the job's output is imported with
    `--project/--job` and no `--cluster`: its OOM joins that job's incident (it made a twin
    job in the `default` cluster, and a second incident, before)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBTRAIL_")}
    env.update(JOBTRAIL_HOME=str(tmp_path / "home"))
    base = {"project": "hafs", "cluster": "c", "job_id": "3495064", "attempt": 1}
    scheduler = tmp_path / "scheduler.jsonl"
    scheduler.write_text("".join(json.dumps({**base, **e}) + "\n" for e in (
        {"type": "job.started", "time": "2021-10-27T19:00:00Z",
         "attributes": {"nodes": ["Orion-01-01"], "gpus": 8}},
        {"type": "job.step", "time": "2021-10-27T19:30:00Z", "attributes": {"step": 100}},
        {"type": "job.failed", "time": "2021-10-27T19:35:40Z", "attributes": {"exit_code": 1}})))
    _run(env, "ingest", str(scheduler))
    output = Path(__file__).parent / "ingest" / "fixtures" / "public" / "slurm-output" / \
        "srun_oom_kill_step_cancelled.txt"
    said = _run(env, "ingest", "--format", "training-log", "--project", "hafs", "--job",
                "3495064", str(output))
    assert "cluster c: the one hafs/3495064 has attempts in" in said
    rows = [json.loads(line) for line in _run(env, "incidents", "--all", "--json").splitlines()]
    assert [(r["class"], r["entity"]) for r in rows] == [("oom", "hafs/3495064/1")]
