"""Any input never crashes the pipeline and always lands stored or dead-lettered."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest.canonical import decode, decode_canonical
from jobtrail.runtime.sink import Sink
from jobtrail.store import Store
from processors.pipeline import Pipeline
from schemas.dead_letters import DeadLetter
from schemas.events import Event
from schemas.registry import REGISTRY
from tests.conftest import OBSERVED

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)

# near-valid events: the right keys with arbitrary values, so validation paths get exercised
_KEYS = ["type", "time", "cluster", "project", "job_id", "attempt", "severity", "scope",
         "entity", "node", "message", "attributes", "id", "source"]
near_events = st.fixed_dictionaries(
    {"type": st.sampled_from(sorted(REGISTRY)), "cluster": st.sampled_from(["c1", ""]),
     "time": st.one_of(st.just("2026-11-30T08:00:00Z"), st.integers(), st.text(max_size=12))},
    optional={k: json_values for k in _KEYS[3:]},
)


def _count(results: list[Event | DeadLetter]) -> tuple[int, int]:
    events = sum(isinstance(r, Event) for r in results)
    return events, len(results) - events


@given(st.binary(max_size=2000))
@settings(max_examples=300)
def test_any_bytes_decode_to_events_or_dead_letters(raw: bytes) -> None:
    results = decode(raw, producer="fuzz", observed_at=OBSERVED)
    assert results, "every payload yields at least one result"
    assert all(isinstance(r, Event | DeadLetter) for r in results)
    assert isinstance(decode_canonical(raw), Event | DeadLetter)


@given(st.lists(st.one_of(json_values, near_events), max_size=8))
@settings(max_examples=300)
def test_any_json_batch_yields_one_result_per_record(batch: list[Any]) -> None:
    text = json.dumps(batch)
    results = decode(text, producer="fuzz", observed_at=OBSERVED)
    assert len(results) == max(1, len(batch))
    for record in results:
        if isinstance(record, DeadLetter):
            assert record.reason and record.stage.startswith("ingest.")


@given(st.lists(st.one_of(near_events, json_values), min_size=1, max_size=12))
@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_pipeline_stores_or_dead_letters_everything(store: Store, batch: list[Any]) -> None:
    lines = "\n".join(json.dumps(item) for item in batch)
    results = decode(lines, producer="fuzz", observed_at=OBSERVED)
    events = [r for r in results if isinstance(r, Event)]
    letters = [r for r in results if isinstance(r, DeadLetter)]
    before_events, before_dead = store.count("events"), store.count("dead_letters")
    sink = Sink(store, Pipeline())
    sink.handle(events, letters)
    new_ids = len({e.id for e in events})
    # ids may repeat across examples (same input generated twice): count growth is bounded
    assert store.count("events") - before_events <= new_ids
    stored = set(store.arrivals([e.id for e in events]))
    assert stored == {e.id for e in events}
    assert store.stored_dead_letter_ids([d.id for d in letters]) == {d.id for d in letters}
    assert store.count("dead_letters") - before_dead <= len(letters)
    assert store.duplicate_ids() == 0
