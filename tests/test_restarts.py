"""Issue 11: the incident log is a pure function of the records, in their order, whatever the
batching, however the input is split across restarts, and wherever a process dies.

A property test (hypothesis) cuts a story (a 64-node flap, five attempts that are never
restarted, a later repeat on the same leaf, and a person's command in the middle) at random
points; each piece runs in a fresh runtime on the same home and store, with a random batch
size and snapshot cadence, and ends cleanly, by a "SIGKILL" (the runner is abandoned mid-drain
without saving its state) or by dying between the store write and the offset commit. The
final incident log must equal the uninterrupted run's, event for event.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobtrail.runtime.embedded import EmbeddedRunner
from jobtrail.runtime.log import EmbeddedLog
from jobtrail.runtime.sink import Sink
from jobtrail.runtime.snapshot import SnapshotFile
from jobtrail.store import Store
from processors.incidents.model import Actor, Command, incident_id
from schemas.events import Event
from tests.processors.incident_kit import at, ev, nodes, pipeline, started, step
from tests.scenarios.library import LIBRARY, load

FLAP = load(LIBRARY / "ib-flap-64.yaml").events


def _story() -> list[Event | Command]:
    out: list[Event | Command] = list(FLAP)
    for n in range(5):  # five attempts fail and are never restarted (restart deadline)
        on = nodes(20 + 2 * n, 21 + 2 * n)
        job = f"lost-{n}"
        out += [started(job, 1, at(101), on), step(job, 1, at(102), 10),
                ev("job.oom", at(104), job=job, attempt=1, node=on[0],
                   attributes={"rank": 0}),
                ev("job.failed", at(104, 5), job=job, attempt=1, attributes={"exit_code": 1})]
    first = out[0]
    assert isinstance(first, Event)
    out.append(Command(command_id="cmd-ack", incident_id=_flap_incident(), command="ack",
                       actor=Actor(kind="person", name="alice"),
                       time=datetime(2026, 11, 30, 11, 0, tzinfo=UTC)))
    out += [step("pretrain", 2, at(m), 1250 + 20 * m) for m in range(105, 180, 15)]
    out += [ev("network.port_down", at(190), scope="port", entity="leaf-01/p2"),
            ev("network.port_down", at(191), scope="port", entity="leaf-01/p2")]
    return out


def _flap_incident() -> str:
    down = next(e for e in FLAP if e.type == "network.port_down")
    return incident_id("network:leaf-01", down.id)


STORY = _story()


def _fresh(chdb: Path) -> Store:
    store = Store.connect(f"chdb://{chdb}", f"r_{uuid.uuid4().hex[:12]}")
    store.migrate()
    return store


def _runner(store: Store, home: Path, batch: int, every: int) -> EmbeddedRunner:
    return EmbeddedRunner(Sink(store, pipeline()), EmbeddedLog(home / "log"), batch_size=batch,
                          snapshots=SnapshotFile(home / "state" / "pipeline.snap"),
                          snapshot_every=every, snapshot_interval_s=3600)


def _log(store: Store) -> list[tuple[Any, ...]]:
    return [(e.id, e.incident_id, e.seq, e.kind, e.time, e.actor, e.data, e.command_id)
            for e in store.load_incident_log()]


class _Died(Exception):
    pass


def _die_before_commit(runner: EmbeddedRunner) -> None:
    """The next offset commit never happens: the store has the batch, the log does not
    know it (a SIGKILL between the two)."""
    def commit(seq: int) -> None:
        raise _Died(seq)

    runner.log.commit = commit  # type: ignore[method-assign]


_BASELINE: dict[str, list[tuple[Any, ...]]] = {}


def _baseline(chdb: Path) -> list[tuple[Any, ...]]:
    if "log" not in _BASELINE:
        with tempfile.TemporaryDirectory() as tmp:
            store = _fresh(chdb)
            runner = _runner(store, Path(tmp), batch=5000, every=10**9)
            runner.submit(STORY)
            runner.close()
            _BASELINE["log"] = _log(store)
    return _BASELINE["log"]


pieces = st.lists(
    st.tuples(st.integers(1, len(STORY)), st.integers(1, 80), st.integers(1, 60),
              st.sampled_from(["clean", "kill", "die-before-commit"])),
    min_size=1, max_size=4)


@given(pieces)
@settings(max_examples=int(os.environ.get("JOBTRAIL_RESTART_EXAMPLES", "20")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
def test_the_incident_log_is_a_function_of_the_records(chdb_path: Path,
                                                       plan: list[tuple[int, int, int, str]],
                                                       ) -> None:
    expected = _baseline(chdb_path)
    assert any(e[3] == "acknowledged" for e in expected)
    assert sum(1 for e in expected if e[6].get("flag") == "no_restart") >= 5
    store = _fresh(chdb_path)
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        cuts = sorted({c for c, _, _, _ in plan} | {len(STORY)})
        start = 0
        for cut, (_, batch, every, end) in zip(cuts, [*plan, plan[-1]], strict=False):
            runner = _runner(store, home, batch, every)
            runner.submit(STORY[start:cut])
            start = cut
            if end == "clean":
                runner.close()
            elif end == "kill":
                runner.drain(max_batches=1)  # then abandoned: no final snapshot
            else:
                _die_before_commit(runner)
                with contextlib.suppress(_Died):
                    runner.drain()
        _runner(store, home, 5000, 10**9).close()  # the last restart drains what is left
    assert _log(store) == expected
    assert store.count("events") == sum(isinstance(r, Event) for r in STORY)
    assert store.duplicate_ids() == 0
