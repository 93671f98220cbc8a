"""Time to detect, acknowledge, mitigate, recover and resolve: one definition
(`processors.incidents.response`), read from the incident's state by the postmortem and from
the store by the boards; both must give the same seconds for every incident of the scenario
library once people have acknowledged, mitigated and resolved some of them."""

from __future__ import annotations

import uuid
from datetime import UTC, timedelta
from pathlib import Path

import pytest

from jobtrail.learn.scenarios import library, load, wiring
from jobtrail.runtime.embedded import EmbeddedLog, EmbeddedRunner
from jobtrail.runtime.sink import Sink
from jobtrail.store import Store
from processors.incidents.model import Actor, Command, InvalidTransition, fold
from processors.incidents.response import MILESTONES, SQL, figures
from processors.pipeline import Pipeline

PEOPLE = [("ack", 3), ("mitigate", 7), ("resolve", 40)]


def _respond(runner: EmbeddedRunner, store: Store) -> int:
    """Acknowledge every incident, mitigate every second one, resolve every third."""
    done = 0
    for n, row in enumerate(sorted(store.incidents(None, infrastructure=True),
                                   key=lambda r: r["incident_id"])):
        opened = row["opened_at"].replace(tzinfo=UTC)
        for command, minutes in PEOPLE[:1 + (n % 2) + (n % 3 == 0)]:
            try:
                runner.sink.command(Command(
                    command_id=f"{row['incident_id']}-{command}",
                    incident_id=row["incident_id"], command=command,  # type: ignore[arg-type]
                    actor=Actor(kind="person", name="oncall"),
                    time=opened + timedelta(minutes=minutes)))
                done += 1
            except InvalidTransition:
                pass
    return done


@pytest.mark.parametrize("path", library(), ids=lambda p: p.stem)
def test_the_store_and_the_fold_give_the_same_response_times(chdb_path: Path, tmp_path: Path,
                                                            path: Path) -> None:
    scenario = load(path)
    store = Store.connect(f"chdb://{chdb_path}", f"t_{uuid.uuid4().hex[:12]}")
    store.migrate()
    try:
        runner = EmbeddedRunner(Sink(store, Pipeline(timedelta(seconds=30), wiring(scenario),
                                                     rules=scenario.rules)),
                                EmbeddedLog(tmp_path / "log"))
        runner.submit(scenario.events)
        runner.drain()
        assert _respond(runner, store)
        rows = {r["incident_id"]: r for r in store._dicts(f"SELECT * FROM ({SQL})")}
        assert rows, "the scenario opened no incident"
        assert any(r["acknowledge_s"] is not None for r in rows.values())
        for incident_id, row in rows.items():
            inc = next(iter(fold(store.incident_log(incident_id)).values()))
            want = figures(inc)
            assert (row["first_signal_at"].replace(tzinfo=UTC)
                    if row["first_signal_at"] else None) == want.first_signal, incident_id
            for name in MILESTONES:
                got = row[f"{name}_s"]
                expected = want.seconds(name)
                assert (got is None) == (expected is None), (incident_id, name, got, expected)
                if expected is not None:
                    assert got == pytest.approx(expected, abs=1e-3), (incident_id, name)
    finally:
        store.client.command(f"DROP DATABASE IF EXISTS {store.database}")
