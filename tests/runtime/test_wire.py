"""The wire key: ingest signs what it produces to jobtrail.events; a worker trusts a message
only when the signature verifies, and stores a trusted event as it arrived."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from ingest.canonical import decode
from jobtrail.runtime.kafka_io import SIGNATURE, sign, signed
from jobtrail.runtime.sink import Sink
from jobtrail.store import Store
from processors.pipeline import Pipeline
from schemas.events import Event

KEY = b"wire-key-for-tests"
SECRET = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"


def _event(**extra: object) -> bytes:
    body = {"id": "e1", "type": "job.step", "time": "2026-11-30T08:00:00Z", "cluster": "c",
            "project": "p", "job_id": "j", "attempt": 1, "attributes": {"step": 1}, **extra}
    return json.dumps(body).encode()


def test_only_the_key_holder_signs() -> None:
    value = b"some message"
    headers = sign(KEY, value)
    assert [name for name, _ in headers] == [SIGNATURE]
    assert signed(KEY, value, headers)
    assert not signed(KEY, value + b" ", headers)  # the content changed
    assert not signed(b"another key", value, headers)
    assert not signed(KEY, value, [])  # unsigned
    assert not signed(b"", value, headers)  # a worker without the key trusts nothing
    assert sign(b"", value) == []


def test_a_trusted_line_is_stored_as_it_came_and_others_are_checked(store: Store) -> None:
    canonical = decode(_event(), producer="t", observed_at=datetime.now(UTC))[0]
    assert isinstance(canonical, Event)
    line = canonical.to_json().encode()
    forged = _event(id="e2", message=f"token {SECRET}")
    bad = _event(id="e3", attributes={"step": "not a number"})
    sink = Sink(store, Pipeline())
    decoded = sink.decode([line, forged, bad], ["a", "b", "c"], trusted=[True, False, False])
    assert decoded.raw == {"e1": line}  # kept for the insert, never serialised again
    assert [e.id for e in decoded.events] == ["e1", "e2"]
    assert SECRET not in decoded.events[1].message  # the untrusted one was redacted
    assert decoded.dead[0].field == "attributes.step"
    sink.handle(decoded.events, decoded.dead, arrivals=["a", "b"], raw=decoded.raw)
    stored = {e.id: e for e in store.events_by_id(["e1", "e2"]).values()}
    assert stored["e1"] == canonical
    # a trusted line that does not parse as an event takes the whole path, never the raw one
    again = sink.decode([b'{"type": "job.step"}'], ["d"], trusted=True)
    assert again.raw == {} and again.dead and again.dead[0].field == "attributes.step"
