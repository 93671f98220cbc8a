"""Every fixture through the full pipeline: stored + dead-lettered = what the adapter read."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest.adapters import Context, registry, run
from jobtrail.runtime.embedded import EmbeddedLog, EmbeddedRunner
from jobtrail.runtime.sink import Sink
from jobtrail.store import Store
from processors.pipeline import Pipeline
from schemas.dead_letters import DeadLetter
from schemas.events import Event
from tests.conftest import OBSERVED
from tests.ingest.public_corpus import Sample, samples
from tests.ingest.public_corpus import context as public_context

FIXTURES = Path(__file__).parent / "fixtures"
CORPUS = sorted(p for p in FIXTURES.glob("*/*") if p.parent.name in registry())


@pytest.mark.parametrize("sample", [s for s in samples() if not s.quiet],
                         ids=lambda s: s.file)
def test_public_samples_nothing_lost(store: Store, tmp_path: Path, sample: Sample) -> None:
    """The public corpus (issue 30) stored through the pipeline: stored + dead-lettered =
    what the adapter read (test_public_corpus compares auto with the explicit adapter)."""
    text = sample.path.read_bytes().decode("utf-8", errors="replace")
    results = run(registry()[sample.format], text, public_context(sample.file))
    events = {r.id for r in results if isinstance(r, Event)}
    letters = {r.id for r in results if isinstance(r, DeadLetter)}
    assert events or letters, f"nothing read from {sample.file}"
    runner = EmbeddedRunner(Sink(store, Pipeline()), EmbeddedLog(tmp_path / "log"))
    runner.submit(results)
    runner.drain()
    assert store.count("events") == len(events)
    assert store.count("dead_letters") == len(letters)
    assert set(store.arrivals(sorted(events))) == events


@pytest.mark.parametrize("fixture", CORPUS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_nothing_lost(store: Store, tmp_path: Path, fixture: Path) -> None:
    ctx = Context(producer="corpus", observed_at=OBSERVED, cluster="cluster-a",
                  project="llm-pretrain", job_id="job-7b-001", attempt=1, node="node-041",
                  origin=fixture.name)
    results = run(registry()[fixture.parent.name], fixture.read_text(), ctx)
    events = {r.id for r in results if isinstance(r, Event)}
    letters = {r.id for r in results if isinstance(r, DeadLetter)}
    assert events, "each fixture yields at least one event"
    runner = EmbeddedRunner(Sink(store, Pipeline()), EmbeddedLog(tmp_path / "log"))
    runner.submit(results)
    runner.drain()
    assert store.count("events") == len(events)
    assert store.count("dead_letters") == len(letters)
    assert set(store.arrivals(sorted(events))) == events


def test_values_past_a_column_are_dead_letters_not_failed_batches(store: Store,
                                                                  tmp_path: Path) -> None:
    """A Slurm InitPrio (uint32) used to overflow the Int32 column and fail every insert of
    its batch; now it is stored, and what no column could hold is a dead letter naming it."""
    import json

    from ingest.canonical import decode

    def job(i: int, **attributes: object) -> dict[str, object]:
        return {"type": "job.submitted", "time": "2026-11-30T07:00:00Z", "cluster": "c",
                "project": "p", "job_id": f"j{i}", "attempt": 1, "attributes": attributes}

    lines = [job(1, priority=4294901759), job(2, priority=2**70), job(3, gpus=2**40)]
    decoded = decode("\n".join(json.dumps(x) for x in lines), producer="t",
                     observed_at=OBSERVED)
    runner = EmbeddedRunner(Sink(store, Pipeline()), EmbeddedLog(tmp_path / "log"))
    runner.submit(decoded)
    runner.drain()
    assert store.count("events") == 1
    letters = {d.field for d in decoded if isinstance(d, DeadLetter)}
    assert letters == {"attributes.priority", "attributes.gpus"}
    (row,) = store.client.query("SELECT priority FROM job_attempts FINAL").result_rows
    assert row == (4294901759,)
