"""Every failure story in the scenario library (tests/scenarios/incidents/*.yaml) gives the
incidents an SRE would conclude, with exact figures, and the same incident log however the
input is batched."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.scenarios.library import check, library, load, run


@pytest.mark.parametrize("path", library(), ids=lambda p: p.stem)
def test_the_story_gives_the_expected_incidents(path: Path) -> None:
    scenario = load(path)
    assert scenario.expect.get("incidents"), "a scenario says what it expects"
    log, _ = run(scenario, batch=1)
    problems = check(scenario, log)
    assert not problems, "\n".join(problems)
    big, _ = run(scenario, batch=500)
    assert [(e.id, e.seq, e.kind) for e in big] == [(e.id, e.seq, e.kind) for e in log]


def test_the_library_holds_the_stories_it_promises() -> None:
    names = {p.stem for p in library()}
    assert len(names) >= 12
    for path in library():
        scenario = load(path)
        assert scenario.story and scenario.source, f"{path.name}: story and source"
