"""`bench.floor` times the embedded runner's engine statements replayed alone: the replay
must store exactly what the runner stored, or its figure is not the runner's floor."""

from __future__ import annotations

from bench import floor


def test_the_replayed_statements_store_what_the_runner_stored() -> None:
    base, emb, low = floor.run(3_000)
    assert base["events"] == emb["events"] == 3_000
    assert low["statements"] == emb["statements"] > 5
    assert emb["rows"]["events"] == emb["rows"]["event_ids"] == 3_000
    assert emb["rows"]["job_timeline"] >= 3_000 and emb["rows"]["incident_log"] > 0
    assert low["rows"] == emb["rows"]
