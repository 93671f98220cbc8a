"""An alert's resolution ends the signal it fired (processors/incidents/ends.py): one signal
with a start and an end; the incident moves on (mitigated, saying so) only once every signal
it holds has ended; a resolution naming a signal no incident holds changes nothing."""

from __future__ import annotations

import json
from datetime import datetime

from ingest.adapters import Context, registry
from ingest.adapters import run as adapt
from schemas.events import Event
from tests.processors.incident_kit import at, incidents, run


def _alert(gpu: str, status: str, starts: datetime, ends: datetime | None = None) -> Event:
    body = {"version": "4", "status": status, "alerts": [{
        "status": status, "fingerprint": f"f{gpu}",
        "labels": {"alertname": "GPUXidError", "node": "node-003", "gpu": gpu, "xid": "79",
                   "severity": "critical"},
        "annotations": {"summary": f"Xid 79 on node-003 GPU {gpu}"},
        "startsAt": starts.isoformat(), "endsAt": (ends or starts).isoformat()}]}
    [event] = adapt(registry()["alertmanager"], json.dumps(body),
                    Context(producer="am", observed_at=ends or starts, origin="t",
                            cluster="cluster-a"))
    assert isinstance(event, Event)
    return event


def test_resolutions_end_their_signals_then_the_incident_moves_on() -> None:
    fire3, fire5 = _alert("3", "firing", at(0)), _alert("5", "firing", at(0, 20))
    end3, end5 = _alert("3", "resolved", at(0), at(2)), _alert("5", "resolved", at(0, 20), at(3))
    assert end3.attributes["ends"] == fire3.id and end3.entity == fire3.entity
    log, _ = run([fire3, fire5, end3])
    (inc,) = incidents(log)
    assert inc.ended == {fire3.id: at(2)} and inc.status == "open"
    assert inc.signals == 2  # the end is not a new signal
    log, _ = run([fire3, fire5, end3, end5])
    (inc,) = incidents(log)
    assert inc.ended == {fire3.id: at(2), fire5.id: at(3)}
    assert inc.status == "mitigated" and inc.mitigated_at == at(3)
    [ended] = [e for e in log if e.kind == "signal_ended" and e.data["ends"] == fire5.id]
    assert (ended.data["event_id"], ended.payload().started_at) == (end5.id, at(0, 20))
    assert [e.actor.kind for e in log if e.kind == "mitigated"] == ["processor"]


def test_a_resolution_of_a_signal_no_incident_holds_changes_nothing() -> None:
    fire3 = _alert("3", "firing", at(0))
    stray = _alert("5", "resolved", at(0), at(2))  # its firing never arrived
    log, _ = run([fire3, stray])
    (inc,) = incidents(log)
    assert inc.ended == {} and inc.status == "open"
    assert not [e for e in log if e.kind in ("signal_ended", "mitigated")]
