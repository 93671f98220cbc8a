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
