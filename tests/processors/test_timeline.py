from __future__ import annotations

from datetime import UTC, datetime, timedelta

from processors.pipeline import Pipeline
from processors.timeline import event_filesystem
from schemas.events import Event, Scope, Source

T0 = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)


def job_event(type_: str, minute: float, job: str, attempt: int = 1, **attrs: object) -> Event:
    return Event(id=f"{job}-{type_}-{attempt}-{minute}", type=type_, source=Source.scheduler,
                 time=T0 + timedelta(minutes=minute), project="p", cluster="c", job_id=job,
                 attempt=attempt, attributes=attrs)


def infra(id_: str, type_: str, minute: float, source: Source, scope: Scope, entity: str,
          node: str | None = None, **attrs: object) -> Event:
    return Event(id=id_, type=type_, source=source, time=T0 + timedelta(minutes=minute),
                 cluster="c", scope=scope, entity=entity, node=node, attributes=attrs)


def start_two_jobs(p: Pipeline) -> None:
    p.process([
        job_event("job.started", 0, "a", nodes=["n1", "n2"], mounts=["lustre:/a"]),
        job_event("job.started", 0, "b", nodes=["n3"], mounts=["nfs:/b"]),
        job_event("job.completed", 30, "b"),
    ])


def test_node_event_lands_only_on_jobs_using_the_node() -> None:
    p = Pipeline()
    start_two_jobs(p)
    out = p.process([infra("x1", "node.xid", 10, Source.node, Scope.gpu, "n2/gpu1", "n2",
                           xid=79)])
    assert [(r.job_id, r.attempt, r.relation, r.entity, r.link_path) for r in out.timeline] == [
        ("a", 1, "gpu", "n2/gpu1", "n2/gpu1 → n2")]


def test_filesystem_event_reaches_every_job_mounting_it() -> None:
    p = Pipeline()
    start_two_jobs(p)
    out = p.process([infra("s1", "storage.latency", 10, Source.storage, Scope.target,
                           "lustre-OST7", filesystem="lustre", latency_ms=900.0)])
    assert [(r.job_id, r.relation) for r in out.timeline] == [("a", "target")]


def test_a_storage_clients_error_reaches_the_attempts_on_its_node() -> None:
    """A Lustre client's `rc = -28` against an OST, logged by a node that runs a job which
    declared no mounts (Slurm never says them) and with no topology mapping the target,
    reaches that job through its node (`client`), and names the filesystem by its fsname;
    a job mounting the filesystem elsewhere is still reached through the mount."""
    p = Pipeline()
    start_two_jobs(p)
    p.process([job_event("job.started", 0, "c", nodes=["n4"])])
    event = infra("l1", "storage.io_error", 10, Source.storage, Scope.target, "scratch-OST0005",
                  "n4", target="OST0005", fsname="scratch", error="ENOSPC (rc=-28)")
    out = p.process([event])
    assert [(r.job_id, r.relation, r.entity, r.link_path) for r in out.timeline] == [
        ("c", "client", "scratch-OST0005", "scratch-OST0005 → n4")]
    assert event_filesystem(event, None) == "scratch"
    on_a = infra("l2", "storage.io_error", 11, Source.storage, Scope.target, "scratch-OST0005",
                 "n4", target="OST0005", fsname="lustre", error="ENOSPC (rc=-28)")
    assert {(r.job_id, r.relation) for r in p.process([on_a]).timeline} == {
        ("a", "target"), ("c", "client")}


def _rollout(minute: float) -> Event:
    return Event(id="chg", type="change.applied", source=Source.change,
                 time=T0 + timedelta(minutes=minute), cluster="c", entity="CHG-1",
                 attributes={"kind": "nccl", "before": "2.18.3", "after": "2.19.3",
                             "ticket": "CHG-1", "nodes": ["n1", "n2", "n3"]})


def test_a_change_applied_before_an_attempt_started_is_on_its_timeline() -> None:
    """A rollout to n1..n3 at 08:00; job a starts on n1, n2 at 09:00 and job b on n3 a day
    later (far past the 10-minute lateness horizon): both timelines show the change once,
    relation `change`, by the first node they share with it; a job elsewhere does not."""
    p = Pipeline()
    assert p.process([_rollout(0)]).timeline == []
    a = p.process([job_event("job.started", 60, "a", nodes=["n1", "n2"])])
    b = p.process([job_event("job.started", 60 * 24, "b", nodes=["n3"])])
    c = p.process([job_event("job.started", 60 * 24, "c", nodes=["n9"])])
    assert [(r.job_id, r.relation, r.entity, r.link_path) for r in a.timeline
            if r.relation != "self"] == [("a", "change", "CHG-1", "CHG-1 → n1")]
    assert [(r.job_id, r.relation, r.link_path) for r in b.timeline
            if r.relation != "self"] == [("b", "change", "CHG-1 → n3")]
    assert [r.relation for r in c.timeline] == ["self"]
    again = p.process([job_event("job.completed", 60 * 25, "b")])  # re-placed: no second row
    assert [r.relation for r in again.timeline] == ["self"]


def test_a_change_that_arrives_after_the_attempt_started_reaches_it_too() -> None:
    """The change record imported after the scheduler's: the attempt that started after the
    change's time is under it all the same."""
    p = Pipeline(lateness=timedelta(hours=6))
    p.process([job_event("job.started", 60, "a", nodes=["n2"])])
    out = p.process([_rollout(0)])
    assert [(r.job_id, r.relation, r.link_path) for r in out.timeline] == [
        ("a", "change", "CHG-1 → n2")]


def test_event_outside_membership_window_is_not_attributed() -> None:
    p = Pipeline()
    start_two_jobs(p)
    late = p.process([infra("n9", "node.not_ready", 31, Source.node, Scope.node, "n3")])
    assert late.timeline == []
    within_slack = p.process([infra("n10", "node.not_ready", 30.3, Source.node, Scope.node,
                                    "n3")])
    assert [r.job_id for r in within_slack.timeline] == ["b"]


def test_infra_event_before_start_in_the_same_batch_is_attributed() -> None:
    p = Pipeline()
    out = p.process([
        infra("d1", "network.port_down", 1, Source.network, Scope.nic, "n1/mlx5_0", "n1"),
        job_event("job.started", 0, "a", nodes=["n1"]),
    ])
    assert {(r.job_id, r.relation) for r in out.timeline} == {("a", "nic"), ("a", "self")}


def test_job_event_without_attempt_uses_the_running_attempt() -> None:
    p = Pipeline()
    p.process([job_event("job.started", 0, "a", 1, nodes=["n1"]),
               job_event("job.requeued", 10, "a", 1),
               job_event("job.started", 12, "a", 2, nodes=["n1"])])
    step = Event(id="st", type="job.step", source=Source.job, time=T0 + timedelta(minutes=15),
                 project="p", cluster="c", job_id="a", attributes={"step": 5})
    out = p.process([step])
    assert [(r.attempt, r.relation) for r in out.timeline] == [(2, "self")]


def test_ended_jobs_leave_the_state_a_day_after_their_end_running_ones_stay() -> None:
    p = Pipeline()
    start_two_jobs(p)  # a runs, b completed at minute 30
    p.process([job_event("job.step", 60, "a", step=5)])
    held = ("p", "b")
    assert held in p.jobs and held in p.detector.book.jobs
    assert ("p", "b", 1) in p.detector.book.progress
    # a day of event time after b ended (and a sweep due): b is gone, a stays
    p.process([job_event("job.step", 30 + 24 * 60 + 11, "a", step=6)])
    assert held not in p.jobs and held not in p.detector.book.jobs
    assert ("p", "b", 1) not in p.detector.book.progress
    assert ("p", "a") in p.jobs and ("p", "a", 1) in p.detector.book.progress
    # a late lifecycle event of the forgotten job starts a fresh record, it does not fail
    out = p.process([job_event("job.requeued", 30 + 24 * 60 + 12, "b")])
    assert {a.job_id for a in out.attempts} == {"b"}


def test_events_held_for_late_attribution_are_bounded_by_count(monkeypatch: object) -> None:
    """A file import's week of horizon: the infrastructure events held for an attempt that
    starts later stay within `MAX_WAITING` (scaled down here), the oldest leaving first; an
    attempt placed afterwards still gets the recent ones (late attribution), not the oldest."""
    import pytest

    from processors import pipeline as module

    assert isinstance(monkeypatch, pytest.MonkeyPatch)
    monkeypatch.setattr(module, "MAX_WAITING", 50)
    p = Pipeline(lateness=timedelta(days=7))
    for i in range(400):
        p.process([infra(f"x{i}", "node.ecc", i / 10, Source.node, Scope.gpu, "n1/gpu0", "n1",
                         kind="sbe", count=1)])
        assert len(p._attributed) <= 50
        assert sum(len(b) for b in p._waiting.values()) <= 50
    assert len(p._waiting_order) <= 50 * 2
    # an attempt on n1 that (the scheduler says) started before all of them
    out = p.process([job_event("job.started", 0, "late", nodes=["n1"])])
    got = {r.event.id for r in out.timeline if r.relation != "self"}
    assert got == {f"x{i}" for i in range(350, 400)}
