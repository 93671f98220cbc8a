from __future__ import annotations

import json

import pytest

from ingest.canonical import ParseError, decode, decode_canonical, to_event
from schemas.dead_letters import DeadLetter
from schemas.events import Event, Scope, Severity, Source
from tests.conftest import OBSERVED


def _step(**extra: object) -> dict[str, object]:
    base: dict[str, object] = {"type": "job.step", "time": "2026-11-30T08:00:00Z",
                               "cluster": "c1", "project": "p", "job_id": "j1", "attempt": 1,
                               "attributes": {"step": 10}}
    base.update(extra)
    return base


def test_valid_event_is_normalised() -> None:
    event = to_event(_step(scope="rank", entity="rank-3"), producer="t", observed_at=OBSERVED)
    assert event.source is Source.job  # from the registry when the producer omits it
    assert event.scope is Scope.rank
    assert event.severity is Severity.info
    assert event.time.isoformat() == "2026-11-30T08:00:00+00:00"
    assert event.observed_at == OBSERVED
    assert event.producer == "t"
    assert event.attributes == {"step": 10}


def test_natural_id_is_stable_across_time_spellings_and_redelivery() -> None:
    a = to_event(_step(), producer="x", observed_at=OBSERVED)
    b = to_event(_step(time=1796025600), producer="y", observed_at=datetime_later())
    assert a.id == b.id
    c = to_event(_step(attributes={"step": 11}), producer="x", observed_at=OBSERVED)
    assert c.id != a.id


def datetime_later():  # type: ignore[no-untyped-def]
    from datetime import timedelta

    return OBSERVED + timedelta(hours=1)


def test_producer_id_is_kept() -> None:
    assert to_event(_step(id="slurm-123-1"), producer="t", observed_at=OBSERVED).id == "slurm-123-1"


@pytest.mark.parametrize(
    ("change", "field", "reason"),
    [
        ({"type": "job.exploded"}, "type", "unknown event type"),
        ({"type": None}, "type", "missing"),
        ({"attributes": {"step": "ten"}}, "attributes.step", "integer"),
        ({"attributes": {}}, "attributes.step", "required"),
        ({"job_id": None}, "job_id", "required for job.step"),
        ({"project": ""}, "project", "required for job.step"),
        ({"time": "yesterday"}, "time", "ISO-8601"),
        ({"severity": "meh"}, "severity", "debug"),
        ({"scope": "galaxy"}, "scope", "node"),
        ({"attempt": -1}, "attempt", "greater than or equal"),
        ({"colour": "red"}, "colour", "Extra inputs"),
        ({"attributes": [1, 2]}, "attributes", "JSON object"),
    ],
)
def test_invalid_event_names_the_field(change: dict[str, object], field: str,
                                       reason: str) -> None:
    with pytest.raises(ParseError) as info:
        to_event(_step(**change), producer="t", observed_at=OBSERVED)
    assert info.value.field == field
    assert reason.lower() in info.value.reason.lower()


def test_unknown_attribute_keys_are_kept() -> None:
    event = to_event(_step(attributes={"step": 1, "tokens_per_s": 9000.5}), producer="t",
                     observed_at=OBSERVED)
    assert event.attributes == {"step": 1, "tokens_per_s": 9000.5}


def test_timezone_less_time_is_utc_and_epoch_ms_is_accepted() -> None:
    naive = to_event(_step(time="2026-11-30T08:00:00"), producer="t", observed_at=OBSERVED)
    ms = to_event(_step(time=1796025600000), producer="t", observed_at=OBSERVED)
    assert naive.time == ms.time
    assert naive.time.utcoffset() is not None


def test_decode_batch_and_json_lines_keep_one_result_per_record() -> None:
    good = json.dumps(_step())
    bad = json.dumps(_step(attributes={"step": -1}))
    batch = decode(f"[{good}, {bad}]", producer="t", observed_at=OBSERVED, origin="body")
    assert [type(r) for r in batch] == [Event, DeadLetter]
    assert isinstance(batch[1], DeadLetter)
    assert batch[1].event_ref == "body[1]"
    assert batch[1].field == "attributes.step"
    lines = decode(f"{good}\n\nnot json\n{bad}\n", producer="t", observed_at=OBSERVED,
                   origin="f.jsonl")
    assert [type(r) for r in lines] == [Event, DeadLetter, DeadLetter]
    assert [r.event_ref for r in lines if isinstance(r, DeadLetter)] == ["f.jsonl:3", "f.jsonl:4"]
    assert isinstance(lines[1], DeadLetter) and lines[1].stage == "ingest.decode"


def test_dead_letter_ids_are_deterministic() -> None:
    one = decode("{oops", producer="t", observed_at=OBSERVED)
    two = decode("{oops", producer="t", observed_at=datetime_later())
    assert isinstance(one[0], DeadLetter) and isinstance(two[0], DeadLetter)
    assert one[0].id == two[0].id


def test_decode_canonical_round_trips_and_rejects_garbage() -> None:
    event = to_event(_step(), producer="t", observed_at=OBSERVED)
    assert decode_canonical(event.to_json()) == event
    letter = decode_canonical(b"\xff\xfe{", position="events/0@7")
    assert isinstance(letter, DeadLetter)
    assert letter.stage == "process.decode" and letter.event_ref == "events/0@7"


def test_the_failure_text_classifier_names_what_a_message_reports() -> None:
    from schemas.failure_text import classify

    cases = {
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB": "oom",
        "RuntimeError: CUDA error: an illegal memory access was encountered": "illegal_memory",
        "NCCL error in: ProcessGroupNCCL.cpp:1275, unhandled cuda error, NCCL version 2.18.1 "
        "... CUDA out of memory": "oom",  # precedence: the OOM explains the NCCL error
        "ncclSystemError: System call (e.g. socket, malloc) or external library call failed":
            "nccl_error",
        "OSError: [Errno 28] No space left on device": "enospc",
        "Bus error (core dumped)": "bus_error",  # a bus error is not a segfault
        "DataLoader worker (pid 4242) is killed by signal: Killed.": "dataloader",
        "step 100 loss 2.1": None,
    }
    for text, label in cases.items():
        assert classify(text) == label, text
