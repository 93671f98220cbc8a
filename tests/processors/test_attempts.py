from __future__ import annotations

import itertools
import random
from datetime import UTC, datetime, timedelta

from processors.attempts import JobRecord, evolve
from schemas.events import Event, Source

T0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)


def ev(type_: str, minute: float, attempt: int | None = 1, **attrs: object) -> Event:
    return Event(id=f"{type_}-{attempt}-{minute}", type=type_, source=Source.scheduler,
                 time=T0 + timedelta(minutes=minute), project="p", cluster="c", job_id="j",
                 attempt=attempt, attributes=attrs)


HISTORY = [
    ev("job.submitted", 0, None, image="img:1", code_version="git:a", data_version="d1",
       gpus=16, mounts=["lustre:/x"], user="alice", queue="gpu"),
    ev("job.pending", 0.1, reason="Resources"),
    ev("job.pending", 5, reason="Priority"),
    ev("job.started", 10, nodes=["n1", "n2"], gpus=16, ranks={"0": "n1", "8": "n2"}),
    ev("job.failed", 40, exit_code=1, reason="NODE_FAIL"),
    ev("job.requeued", 40.5, reason="NODE_FAIL"),
    ev("job.started", 45, 2, nodes=["n1", "n3"], image="img:2"),
    ev("job.completed", 90, 2, exit_code=0),
]


def fold(events: list[Event]) -> JobRecord:
    job: JobRecord | None = None
    for e in events:
        job, _ = evolve(job, e)
    assert job is not None
    return job


def test_attempts_carry_membership_versions_and_queue_wait() -> None:
    job = fold(HISTORY)
    first, second = job.attempts[1], job.attempts[2]
    assert first.state == "failed" and first.exit_code == 1 and first.end_reason == "NODE_FAIL"
    assert first.nodes == ("n1", "n2") and first.gpus == 16
    assert dict(first.ranks) == {"0": "n1", "8": "n2"}
    assert first.queue_wait_s == 600.0
    assert [r for _, r in first.pending] == ["Resources", "Priority"]
    assert (first.image, first.code_version, first.data_version) == ("img:1", "git:a", "d1")
    # the retry is a new attempt: submitted at the requeue, inherits versions, own image
    assert second.state == "completed"
    assert second.submitted_at == T0 + timedelta(minutes=40.5)
    assert second.queue_wait_s == 270.0
    assert (second.image, second.code_version) == ("img:2", "git:a")
    assert second.mounts == ("lustre:/x",) and second.user == "alice"


def test_fold_is_idempotent() -> None:
    once = fold(HISTORY)
    twice = fold(HISTORY + HISTORY)
    assert once == twice
    _, changed = evolve(once, HISTORY[3])
    assert changed == frozenset()


def test_attempt_one_is_order_insensitive() -> None:
    expected = fold(HISTORY).attempts[1]
    rng = random.Random(7)
    first_attempt = HISTORY[:6]
    for order in itertools.islice(itertools.permutations(first_attempt), 0, 720, 37):
        shuffled = list(order)
        rng.shuffle(shuffled)
        got = fold(shuffled).attempts[1]
        assert (got.state, got.started_at, got.ended_at, got.nodes, got.exit_code,
                got.pending, got.queue_wait_s, got.image) == (
            expected.state, expected.started_at, expected.ended_at, expected.nodes,
            expected.exit_code, expected.pending, expected.queue_wait_s, expected.image)


def test_late_start_does_not_resurrect_a_failed_attempt() -> None:
    job = fold([ev("job.failed", 40, exit_code=137), ev("job.started", 10, nodes=["n1"])])
    assert job.attempts[1].state == "failed"
    assert job.attempts[1].nodes == ("n1",)


def test_preemption_outranks_the_requeue_that_follows_it() -> None:
    job = fold([ev("job.started", 1), ev("job.preempted", 5, reason="priority"),
                ev("job.requeued", 5.1)])
    assert job.attempts[1].state == "preempted"
    assert job.attempts[2].state == "pending"


def test_non_lifecycle_events_do_not_touch_attempts() -> None:
    step = Event(id="s", type="job.step", source=Source.job, time=T0, project="p", cluster="c",
                 job_id="j", attempt=1, attributes={"step": 1})
    assert evolve(None, step) == (None, frozenset())


def test_an_event_without_attempt_belongs_to_the_attempt_running_then() -> None:
    # a slurmctld requeue line carries no restart count
    job = fold([*HISTORY[:7], ev("job.requeued", 60, None, reason="NODE_FAIL")])
    assert job.attempts[2].state == "requeued" and job.attempts[2].end_reason == "NODE_FAIL"
    assert job.attempts[1].state == "failed"  # untouched
    assert job.attempts[3].submitted_at == T0 + timedelta(minutes=60)
