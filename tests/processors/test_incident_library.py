"""Every failure story in the scenario library (tests/scenarios/incidents/*.yaml) gives the
incidents an SRE would conclude, with exact figures, and the same incident log however the
input is batched."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from processors.incidents.model import fold
from processors.pipeline import Pipeline
from tests.processors.incident_kit import replayed, stored
from tests.scenarios.library import check, library, load, offset, run, wiring


@pytest.mark.parametrize("path", library(), ids=lambda p: p.stem)
def test_the_story_gives_the_expected_incidents(path: Path) -> None:
    scenario = load(path)
    assert scenario.expect.get("incidents"), "a scenario says what it expects"
    log, _ = run(scenario, batch=1)
    problems = check(scenario, log)
    assert not problems, "\n".join(problems)
    big, _ = run(scenario, batch=500)
    assert [(e.id, e.seq, e.kind) for e in big] == [(e.id, e.seq, e.kind) for e in log]


@pytest.mark.parametrize("path", library(), ids=lambda p: p.stem)
def test_the_store_holds_what_a_replay_of_the_log_gives(path: Path) -> None:
    """After every batch, the projections the runtimes wrote (only what each batch's events
    touched) are the ones `jobtrail replay` rebuilds from the log: no impact, loss or
    evidence a revision carried is left out of `incident_jobs` and the others."""
    scenario = load(path)
    pipeline = Pipeline(timedelta(seconds=30), wiring(scenario),
                        lateness=offset(scenario.raw.get("lateness", "10m")),
                        rules=scenario.rules)
    batches, log = [], []
    for n, event in enumerate(scenario.events):
        out = pipeline.process([event])
        batches.append((out.incident_states, out.incidents))
        log += out.incidents
        written, rebuilt = stored(batches), replayed(log)
        for table, rows in rebuilt.items():
            assert written[table] == rows, f"after events[{n}] ({event.type}): {table}"


def test_the_library_holds_the_stories_it_promises() -> None:
    names = {p.stem for p in library()}
    assert len(names) >= 12
    for path in library():
        scenario = load(path)
        assert scenario.story and scenario.source, f"{path.name}: story and source"


@pytest.mark.parametrize("path", library(), ids=lambda p: p.stem)
def test_the_store_counts_a_failed_attempt_once(path: Path) -> None:
    """When late evidence moves an attempt into another incident (or withdraws the incident
    that held it), the store's old row is overwritten as `moved` (no GPUs, no loss) and the
    withdrawn incident's row holds no loss: a job's lost GPU-hours, summed over the store's
    rows as the job dashboard does, are the loss of the incidents the log holds it in."""
    scenario = load(path)
    pipeline = Pipeline(timedelta(seconds=30), wiring(scenario),
                        lateness=offset(scenario.raw.get("lateness", "10m")),
                        rules=scenario.rules)
    batches, log = [], []
    for event in scenario.events:
        out = pipeline.process([event])
        batches.append((out.incident_states, out.incidents))
        log += out.incidents
    rows = stored(batches)
    live = {i.id: i for i in fold(log).values() if not i.withdrawn}
    failed: dict[tuple[str, str, int], list[str]] = {}
    for (inc_id, project, job, attempt), row in rows["incident_jobs"].items():
        if row["role"] == "failed":
            failed.setdefault((project, job, attempt), []).append(inc_id)
        if inc_id not in live:
            assert row["role"] == "moved" and row["lost_gpu_hours"] == 0, row
    for attempt, holders in failed.items():
        assert len(holders) == 1, f"{attempt} failed in {holders}"
    for (inc_id,), row in rows["incidents"].items():
        if inc_id not in live:
            assert "withdrawn" in row["flags"] and row["lost_gpu_hours"] == 0, row
    total = sum(r["lost_gpu_hours"] for r in rows["incident_jobs"].values())
    assert round(total, 6) == round(sum(sum(j.lost_gpu_hours for j in i.jobs.values())
                                        for i in live.values()), 6)
