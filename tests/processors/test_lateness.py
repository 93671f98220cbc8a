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


def _two_files() -> tuple[list[list[object]], list[object]]:
    """2,000 events in time order, then a second file over the same hours (other jobs)."""
    load = Load(nodes=16, open_jobs=4, spacing_ms=2_000, incident_rate=0)
    first = [_events(load.opening())] + [_events(load.batch(100)) for _ in range(20)]
    again = Load(nodes=16, open_jobs=4, spacing_ms=2_000, incident_rate=0, seed=99)
    again.next_job = 10_000
    second = _events(again.opening()) + [e for _ in range(20) for e in _events(again.batch(100))]
    return first, second


def _week(monkeypatch: pytest.MonkeyPatch, **limits: int,
          ) -> tuple[Pipeline, list[list[object]], list[object]]:
    """A pipeline with a week's horizon and `lateness`'s limits scaled down, and its files."""
    from processors.incidents import lateness

    for name, value in limits.items():
        monkeypatch.setattr(lateness, name, value)
    return (Pipeline(lateness=timedelta(days=7)), *_two_files())


def test_a_long_horizon_is_bounded_by_events(monkeypatch: pytest.MonkeyPatch) -> None:
    """A week's horizon (a file import's): the journal still holds at most `MAX_JOURNAL`
    events past a checkpoint (scaled down here); older late events are stragglers."""
    pipeline, first, second = _week(monkeypatch, MAX_JOURNAL=500)
    late = pipeline.reorder
    for batch in first:
        pipeline.process(batch)  # type: ignore[arg-type]
        assert len(late.journal) <= 500 + 500 // 5 + 100
        assert len(late.checkpoints) <= MAX_CHECKPOINTS
    pipeline.process(second[:100])  # type: ignore[arg-type]
    assert late.stragglers == 100 and late.reevaluations == 0


def test_a_late_file_replays_within_its_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """A second file spanning the first one's hours is late in every event, and each event
    would replay the first file's events after it: once the replay budget is spent (scaled
    down here) the rest is decided where it arrives, each event still taken."""
    pipeline, first, second = _week(monkeypatch, REPLAY_FLOOR=20_000, REPLAY_PER_EVENT=3)
    late = pipeline.reorder
    for batch in first:
        pipeline.process(batch)  # type: ignore[arg-type]
    observed = late.observed
    for i in range(0, len(second), 100):
        pipeline.process(second[i:i + 100])  # type: ignore[arg-type]
        assert late.replayed <= 3 * late.observed + 20_000
    assert late.observed - observed == len(second)
    assert late.reevaluations > 0 and late.stragglers > 0
    assert late.reevaluations + late.stragglers == len(second)


def test_a_checkpoint_restores_the_signals_and_shares_their_bytes() -> None:
    """A checkpoint pickles the book without its signals and keeps each signal's bytes (its
    event as JSON, its key and reach pickled) by reference: the bytes the live signal holds,
    made once however many checkpoints, and again only when its reach grows."""
    import pickle

    from processors.incidents.checkpoint import Checkpoint

    pipeline = Pipeline()
    load = Load(nodes=16, open_jobs=2, spacing_ms=2_000, incident_rate=0)
    pipeline.process(_events(load.opening()))
    for _ in range(10):
        pipeline.process(_events(load.batch(100)))
    book = pipeline.detector.book
    assert len(book.signals) > 10 and book.counts
    first, second = Checkpoint.of(None, book), Checkpoint.of(None, book)
    assert all(a is b is s.packed
               for a, b, s in zip(first.signals, second.signals, book.signals, strict=True))
    book.signals[0].reach(("p", "late-job", 1), ("gpu", "node-x/gpu0 → node-x"))
    third = Checkpoint.of(None, book)
    assert third.signals[0][1] is not first.signals[0][1]  # the reach is packed again,
    assert third.signals[0][0] is first.signals[0][0]  # the event's JSON is not
    assert ("p", "late-job", 1) in third.restore().signals[0].reached
    assert ("p", "late-job", 1) not in first.restore().signals[0].reached
    for restored in (third.restore(), pickle.loads(pickle.dumps(book))):
        assert [(s.event, s.rule.name, s.key, s.reached) for s in restored.signals] == \
            [(s.event, s.rule.name, s.key, s.reached) for s in book.signals]
        assert restored.counts == book.counts and restored.progress == book.progress
    # a snapshot packs the journal's positions as milliseconds: they come back the same
    late = pickle.loads(pickle.dumps(pipeline.reorder))
    assert late.journal == pipeline.reorder.journal and len(late.journal) > 100
    assert all(at.tzinfo is not None for (at, _), _ in late.journal)


@pytest.mark.parametrize("offset_us", [-1, 0, 1, 999, 1000, 1001])
def test_signal_counts_in_milliseconds_keep_the_window_bounds(offset_us: int) -> None:
    """A signal count holds whole milliseconds (cheap to pickle at every checkpoint): a
    signal is still in its window exactly when its time is not before the window's start,
    whatever fraction of a millisecond the start has."""
    from processors.incidents.book import millis

    signal_at = T0 + timedelta(milliseconds=123)
    bound = signal_at + timedelta(microseconds=offset_us)
    assert (millis(signal_at) < millis(bound, up=True)) == (signal_at < bound)
