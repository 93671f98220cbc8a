"""Every failure story in the scenario library (tests/scenarios/incidents/*.yaml) gives the
incidents an SRE would conclude, with exact figures, and the same incident log however the
input is batched."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from jobtrail.learn.scenarios import Clusters
from processors.incidents.model import fold
from schemas.events import Event
from tests.processors.incident_kit import replayed, stored
from tests.scenarios.library import check, library, load, run


@pytest.mark.parametrize("path", library(), ids=lambda p: p.stem)
def test_the_story_gives_the_expected_incidents(path: Path) -> None:
    scenario = load(path)
    assert scenario.expect.get("incidents"), "a scenario says what it expects"
    log, _ = run(scenario, batch=1)
    problems = check(scenario, log)
    assert not problems, "\n".join(problems)
    big, _ = run(scenario, batch=500)
    if len({e.cluster for e in scenario.events}) > 1:  # a batch goes cluster by cluster:
        big, log = (sorted(x, key=lambda e: (e.incident_id, e.seq)) for x in (big, log))
    assert [(e.id, e.seq, e.kind) for e in big] == [(e.id, e.seq, e.kind) for e in log]


@pytest.mark.parametrize("path", library(), ids=lambda p: p.stem)
def test_the_store_holds_what_a_replay_of_the_log_gives(path: Path) -> None:
    """After every batch, the projections the runtimes wrote (only what each batch's events
    touched) are the ones `jobtrail replay` rebuilds from the log: no impact, loss or
    evidence a revision carried is left out of `incident_jobs` and the others."""
    scenario = load(path)
    pipeline = Clusters(scenario)
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


def _files_back_to_front(events: list[Event]) -> list[Event]:
    """What a person importing one file per source does, last source first: each source's
    events in time order, the sources one after another (late evidence everywhere)."""
    by_time = sorted(events, key=lambda e: (e.time, e.id))
    return sorted(by_time, key=lambda e: e.source.value, reverse=True)


@pytest.mark.parametrize("order", ["as-told", "files-back-to-front"])
@pytest.mark.parametrize("path", library(), ids=lambda p: p.stem)
def test_the_store_counts_a_failed_attempt_once(path: Path, order: str) -> None:
    """When late evidence moves an attempt into another incident (or withdraws the incident
    that held it), the store's old row is overwritten as `moved` (no GPUs, no loss) and the
    withdrawn incident's row holds no loss: a job's lost GPU-hours, summed over the store's
    rows as the job dashboard does, are the loss of the incidents the log holds it in. The
    same for evidence: a revision's dropped evidence is overwritten as `moved`. In the
    order the story is told, and in the order of files imported one source after another
    (which once crashed the detector: a renamed incident's repeat-offender token)."""
    scenario = load(path)
    pipeline = Clusters(scenario)
    batches, log = [], []
    events = list(scenario.events)
    for event in events if order == "as-told" else _files_back_to_front(events):
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
    # and the evidence a revision took out is overwritten as `moved`: what the store shows
    # of an incident's evidence is what the incident stands on
    shown: dict[str, set[str]] = {}
    for (inc_id, event_id), row in rows["incident_evidence"].items():
        if row["role"] != "moved":
            shown.setdefault(inc_id, set()).add(event_id)
    for inc_id, inc in live.items():
        assert shown.get(inc_id, set()) == set(inc.evidence), inc_id


def _answer(scenario: object, events: list[Event]) -> list[tuple[object, ...]]:
    """What a person reads off the incidents: class, entity, owner, the attempts that
    failed in each, and its loss."""
    pipeline = Clusters(scenario)  # type: ignore[arg-type]
    log = []
    for event in events:
        log += pipeline.process([event]).incidents
    return sorted((i.klass, i.entity, i.owner, round(i.lost_gpu_hours, 2),
                   tuple(sorted(k for k, j in i.jobs.items() if j.role == "failed")))
                  for i in fold(log).values() if not i.withdrawn)


@pytest.mark.parametrize("path", library(), ids=lambda p: p.stem)
def test_files_in_any_order_give_the_incidents_of_the_events_times(path: Path) -> None:
    """The path a person takes: one file per source (scheduler, node, job, ...), imported
    one after another in any order, each in its own time order. Every order of the files
    gives the incidents the events give in time order (up to 24 orders a story)."""
    scenario = load(path)
    events = sorted(scenario.events, key=lambda e: (e.time, e.id))
    in_time = _answer(scenario, events)
    sources = sorted({e.source.value for e in events})
    for files in list(itertools.permutations(sources))[:24]:
        got = _answer(scenario, [e for s in files for e in events if e.source.value == s])
        assert got == in_time, f"files {files}"
