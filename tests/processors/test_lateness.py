"""The lateness journal and its checkpoints hold the events of the horizon, whatever the
horizon: a backfill runs with hours of it (`JOBTRAIL_LATENESS_S`), and past that the state
must not grow with every event seen."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from bench.memory_load import Load, _events
from processors.incidents.lateness import MAX_CHECKPOINTS
from processors.pipeline import Pipeline

T0 = datetime(2026, 11, 1, tzinfo=UTC)


@pytest.mark.parametrize("horizon", [timedelta(minutes=10), timedelta(hours=1),
                                     timedelta(hours=2), timedelta(hours=7)])
def test_the_journal_and_checkpoints_are_bounded_by_the_horizon(horizon: timedelta) -> None:
    pipeline = Pipeline(lateness=horizon)
    load = Load(nodes=16, open_jobs=2, spacing_ms=10_000, incident_rate=0)
    pipeline.process(_events(load.opening()))
    late, batches = pipeline.reorder, 0
    while load.t - T0 < 4 * horizon + timedelta(hours=1):
        batch = _events(load.batch(60))
        batch[-2], batch[-1] = batch[-1], batch[-2]  # one late event: a replay's checkpoints
        pipeline.process(batch)
        batches += 1
        assert len(late.checkpoints) <= MAX_CHECKPOINTS
        # what is kept reaches back one checkpoint interval past the horizon, no further
        oldest = late.journal[0][0][0]
        assert load.t - oldest <= horizon + late.every + timedelta(minutes=1), (
            load.t - T0, load.t - oldest)
    assert late.reevaluations == batches
