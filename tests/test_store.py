from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from clickhouse_connect.driver.exceptions import DatabaseError, OperationalError

from jobtrail.runtime.sink import Sink
from jobtrail.store import Store, migrations
from jobtrail.store.retry import RetryPolicy, StoreRejected, StoreUnavailable
from processors.pipeline import Pipeline
from schemas.events import Event, Source


@pytest.fixture
def store(backend_store: Store) -> Store:
    """This module is the store contract: it runs on chDB and on a server."""
    return backend_store


T0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)


def step(project: str, job: str, n: int) -> Event:
    return Event(id=f"{project}-{job}-{n}", type="job.step", source=Source.job,
                 time=T0 + timedelta(seconds=n), project=project, cluster="c", job_id=job,
                 attempt=1, attributes={"step": n})


def test_migrations_are_idempotent(store: Store) -> None:
    assert store.migrate() == []
    versions = [v for v, _, _ in migrations()]
    assert versions == sorted(versions) and versions[0] == 1


def test_timeline_is_bound_to_the_project(store: Store) -> None:
    sink = Sink(store, Pipeline())
    sink.handle([step("alpha", "shared-name", i) for i in range(3)]
                + [step("beta", "shared-name", i) for i in range(5)])
    assert len(store.timeline("alpha", "shared-name")) == 3
    assert len(store.timeline("beta", "shared-name")) == 5
    assert store.timeline("gamma", "shared-name") == []
    # user input is bound, never formatted: a quote is just a project name that matches nothing
    assert store.timeline("alpha' OR '1'='1", "shared-name") == []


def test_timeline_filters_attempt_and_time(store: Store) -> None:
    Sink(store, Pipeline()).handle([step("p", "j", i) for i in range(10)])
    rows = store.timeline("p", "j", since=T0 + timedelta(seconds=3),
                          until=T0 + timedelta(seconds=5))
    assert [r["time"] for r in rows] == [T0 + timedelta(seconds=s) for s in (3, 4, 5)]
    assert store.timeline("p", "j", attempt=2) == []


def test_redelivered_batch_is_not_stored_twice(store: Store) -> None:
    sink = Sink(store, Pipeline())
    batch = [step("p", "j", i) for i in range(50)]
    first = sink.handle(batch + batch[:5])
    second = sink.handle(batch)
    assert (first.stored, first.duplicates) == (50, 5)
    assert (second.stored, second.duplicates) == (0, 50)
    assert store.count("events", final=False) == 50
    assert store.count("job_timeline", final=False) == 50
    assert store.duplicate_ids() == 0


HOSTILE_IDS = ["plain-1", "it's", "back\\slash", "tick`", "tab\there", "line\nbreak",
               "{ids:Array(String)}", "%s%(x)s", "') OR 1=1 --", "\\'", "ünï-🙂", "x" * 128,
               '"dq"', "ctl\x01", "\\u0041", "')), 'x"]


def test_redelivery_is_found_whatever_the_ids_hold(store: Store) -> None:
    # the dedup lookup writes its id list into the SQL itself: every id must still match
    # exactly itself, and none may break out of its literal
    sink = Sink(store, Pipeline())
    batch = [step("p", "j", i).model_copy(update={"id": hostile})
             for i, hostile in enumerate(HOSTILE_IDS)]
    assert sink.handle(batch).stored == len(HOSTILE_IDS)
    assert set(store.arrivals([*HOSTILE_IDS, "absent", "it"])) == set(HOSTILE_IDS)
    again = sink.handle(batch)
    assert (again.stored, again.duplicates) == (0, len(HOSTILE_IDS))
    assert store.count("events", final=False) == len(HOSTILE_IDS)


def test_state_survives_a_restart(store: Store) -> None:
    started = Event(id="s1", type="job.started", source=Source.scheduler, time=T0, project="p",
                    cluster="c", job_id="j", attempt=1, attributes={"nodes": ["n1"]})
    Sink(store, Pipeline()).handle([started])
    restarted = Sink(store, Pipeline())
    assert "1 attempts" in restarted.restore()
    xid = Event(id="x1", type="node.xid", source=Source.node, time=T0 + timedelta(minutes=1),
                cluster="c", scope="node", entity="n1", attributes={"xid": 79})
    assert restarted.handle([xid]).timeline_rows == 1


def test_retry_policy_backs_off_then_gives_up() -> None:
    sleeps: list[float] = []
    calls = {"n": 0}

    def flaky() -> str:
        calls["n"] += 1
        if calls["n"] < 3:
            raise OperationalError("connection refused")
        return "ok"

    policy = RetryPolicy(attempts=5, first_delay_s=0.1, max_delay_s=0.3)
    assert policy.run(flaky, sleep=sleeps.append) == "ok"
    assert sleeps == [0.1, 0.2]

    def down() -> str:
        raise OperationalError("connection refused")

    sleeps.clear()
    with pytest.raises(StoreUnavailable, match="gave up after 5 tries"):
        policy.run(down, sleep=sleeps.append)
    assert sleeps == [0.1, 0.2, 0.3, 0.3]


def test_a_refusal_is_not_retried_and_a_budget_bounds_an_outage() -> None:
    sleeps: list[float] = []

    def refused() -> str:
        raise DatabaseError("Code: 62. DB::Exception: Syntax error", code=62)

    with pytest.raises(StoreRejected, match="Syntax error"):
        RetryPolicy().run(refused, sleep=sleeps.append)
    assert sleeps == []  # a refusal is final: retrying it would only wedge the caller

    def busy() -> str:
        raise DatabaseError("Code: 252. DB::Exception: Too many parts", code=252)

    now = {"t": 0.0}

    def sleep(s: float) -> None:
        sleeps.append(s)
        now["t"] += s

    with pytest.raises(StoreUnavailable):
        RetryPolicy(first_delay_s=1, max_delay_s=10, budget_s=60).run(
            busy, sleep=sleep, clock=lambda: now["t"])
    # backs off to the cap and stops inside the budget, however many tries that takes
    assert sleeps == [1, 2, 4, 8, 10, 10, 10, 10]


def test_a_bad_statement_reaches_the_caller_at_once_on_both_backends(store: Store) -> None:
    with pytest.raises(StoreRejected):
        store.retry.run(lambda: store.client.query("SELECT no_such_column FROM events"))


def test_the_first_record_of_an_id_is_the_one_stored(store: Store) -> None:
    # an unsigned record, then a signed one with the same id and other content: the batch
    # processes the first, so the first's bytes are the `events` row (the second is a
    # conflict), whichever decode path each took
    sink = Sink(store, Pipeline())
    first = step("p", "j", 1)
    second = first.model_copy(update={"message": "other content"})
    decoded = sink.decode([first.to_json().encode(), second.to_json().encode()],
                          ["m/1", "m/2"], trusted=[False, True])
    assert [e.message for e in decoded.events] == ["", "other content"]
    result = sink.handle(decoded.events, decoded.dead, arrivals=["m/1", "m/2"],
                         raw=decoded.raw)
    assert result.stored == 1 and len(result.dead_letters) == 1
    assert store.events_by_id([first.id])[first.id].message == ""
