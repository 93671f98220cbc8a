"""The ground-truth generator's fast subset (`python -m bench.stories --count 1000` runs the
bench): a story is its seed, its truth agrees with what really happened in it (the attempts,
the library's mode, a loss worked out by hand), the scorer counts a wrong class, entity,
owner or loss as a miss, and twenty stories (every mode of the library's first twenty
forced once) delivered as canonical events and as raw files keep a floor measured with
margin."""

from __future__ import annotations

import dataclasses
from collections import Counter
from datetime import timedelta
from functools import cache
from itertools import pairwise
from typing import Any

import pytest

from bench import stories, story_raw
from bench.story_model import PROJECT, Run, Story, node, port
from bench.story_modes import library
from bench.story_score import LOSS_TOLERANCE, Concluded, Report, score

SEED = 100
COUNT = 20


@cache
def _stories() -> tuple[Story, ...]:
    return tuple(stories.stories(COUNT, first_seed=SEED))


def _run(story: Story, key: str) -> Run:
    return next(r for r in story.runs if r.key == key)


def test_a_story_is_its_seed_and_every_delivery_carries_the_same_events() -> None:
    one, again = stories.generate(5), stories.generate(5)
    assert [e.id for _, e in one.events] == [e.id for _, e in again.events]
    assert one.truth == again.truth
    orders = stories.deliveries(one, which=("time", "files", "live"))
    ids = [e.id for e in orders["time"]]
    assert len(set(ids)) == len(ids)
    for name in ("files", "live"):
        assert sorted(e.id for e in orders[name]) == sorted(ids), name
    assert [e.id for e in orders["files"]] != ids


def test_the_truth_agrees_with_what_happened_in_the_story() -> None:
    lib = library()
    for story in _stories():
        victim = story.lineage
        assert victim[-1].outcome == "completed", story.seed
        for before, after in pairwise(victim):
            assert before.end is not None and before.end <= after.start, story.seed
        failed = {r.key for r in victim if r.outcome != "completed"}
        charged = [k for t in story.truth if t.lost_gpu_hours is not None for k in t.jobs]
        # every failed attempt of the victim is charged to exactly one truth
        assert sorted(charged) == sorted(failed), story.seed
        for t in story.truth:
            if not t.jobs or t.lost_gpu_hours is None:  # a herring's, a checkpoint's
                continue
            mode = lib.mode(t.mode)
            assert t.klass == mode.truth.klass, (story.seed, t)
            assert t.owner == (f"project:{PROJECT}" if mode.job_own else mode.truth.owner)
            runs = [_run(story, k) for k in t.jobs]
            if mode.truth.entity in ("gpu", "node", "port", "nic"):
                if mode.truth.entity == "port":
                    where = {port(n) for r in runs for n in r.nodes}
                    assert t.entity in where, (story.seed, t)
                else:
                    where = {node(n) for r in runs for n in r.nodes}
                    assert t.entity.split("/")[0] in where, (story.seed, t)
            assert t.lost_gpu_hours is not None and t.lost_gpu_hours > 0, (story.seed, t)
            # never more than every GPU held from the first attempt to the recovery
            span = max(r.gpus for r in victim) * sum(
                ((r.end or r.start) - r.start).total_seconds() for r in victim) / 3600
            assert t.lost_gpu_hours <= span, (story.seed, t)


def test_a_single_failure_loses_the_gpus_from_its_checkpoint_until_progress_resumed() -> None:
    """Worked out by hand, apart from `story_truth`: GPUs x (the next attempt's first step -
    the end of the save it restored), less the time the job waited unheld (`Priority`)."""
    checked = 0
    for story in _stories():
        if story.pattern != "single" or len(story.lineage) != 2:
            continue
        first, second = story.lineage
        if not first.requeued or first.outcome == "preempted" or len(first.pending) != 1:
            continue
        assert second.resumed is not None and first.end is not None
        saved = {s.step: s.finished for s in first.saves if s.finished is not None}
        kept = saved[second.restored] if second.restored is not None else first.resumed
        assert kept is not None
        at, reason = first.pending[0]
        unheld = (second.start - at) if reason != "Resources" else timedelta(0)
        hours = first.gpus * ((second.resumed - kept) - unheld).total_seconds() / 3600
        truth = next(t for t in story.truth if first.key in t.jobs)
        assert truth.lost_gpu_hours == pytest.approx(hours, abs=1e-5), story.seed
        checked += 1
    assert checked >= 5  # the twenty stories hold this many such (measured: 13)


def test_the_scorer_counts_a_wrong_answer_as_a_miss() -> None:
    story = next(s for s in _stories() if any(t.jobs and t.lost_gpu_hours for t in s.truth))
    truths = list(story.truth)
    right = tuple(Concluded(t.klass, t.entity, t.owner, t.jobs, t.lost_gpu_hours or 0.0,
                            t.recovery, t.cluster) for t in truths)
    for s in score(story, right):
        assert all(h is not False for h in s.hits.values()), s
    target = next(i for i, t in enumerate(truths) if t.jobs and t.lost_gpu_hours)
    loss = truths[target].lost_gpu_hours
    assert loss is not None

    def sabotaged(**change: Any) -> dict[str, bool | None]:
        wrong = list(right)
        wrong[target] = right[target]._replace(**change)
        return next(s.hits for s in score(story, tuple(wrong))
                    if s.truth == truths[target])

    assert sabotaged(klass="network")["class"] is False
    assert sabotaged(owner="storage")["owner"] is False
    assert sabotaged(entity="node-999")["entity"] is False
    assert sabotaged(lost_gpu_hours=loss * (1 + 1.5 * LOSS_TOLERANCE))["loss"] is False
    assert sabotaged(lost_gpu_hours=0.0)["loss"] is False
    assert sabotaged(lost_gpu_hours=loss * (1 + 0.5 * LOSS_TOLERANCE))["loss"] is True
    # no incident at all: a miss on every measure
    missing = next(s for s in score(story, tuple(a for i, a in enumerate(right) if i != target))
                   if s.truth == truths[target])
    assert missing.got is None and missing.hits["class"] is False
    # and the report counts them
    report = Report()
    report.add(story, {"time": right, "bad": tuple(
        a._replace(klass="network") if i == target else a for i, a in enumerate(right))})
    assert report.rate("class", delivery="time") == 1.0
    assert report.rate("class", delivery="bad") < 1.0


def test_twenty_stories_keep_their_measured_floor_delivered_as_events_and_as_raw_files(
) -> None:
    """Floors measured on these twenty stories (seed 100, the library's first twenty modes
    forced once) less a margin, so a change that breaks a mode fails here and a better engine
    passes; `python -m bench.stories` gives the figures over 1,000."""
    report = Report()
    dead: Counter[str] = Counter()
    for story in _stories():
        got = {name: stories.answer(stories.run(events)) for name, events in
               stories.deliveries(story, which=("time", "raw")).items()}
        report.add(story, got)
        dead.update(story_raw.read(story, story_raw.shuffled(story)).dead)
    assert not dead, dead  # every raw file the generator writes, its adapter reads
    # measured 2026-12-07: time 92.5/90.0/95.0/69.0 %, raw 90.0/77.5/92.5/69.0 %, 4 extra
    floors = {"time": {"class": 0.85, "entity": 0.8, "owner": 0.85, "loss": 0.55},
              "raw": {"class": 0.8, "entity": 0.65, "owner": 0.8, "loss": 0.55}}
    for delivery, measures in floors.items():
        for measure, floor in measures.items():
            assert report.rate(measure, delivery=delivery) >= floor, report.text()
    assert sum(report.extra.values()) <= 8, report.text()


def test_a_truth_that_names_another_cluster_is_not_explained_by_this_ones_incident() -> None:
    story = next(s for s in _stories() if any(not t.jobs for t in s.truth))
    idle = next(t for t in story.truth if not t.jobs)
    elsewhere = dataclasses.replace(idle, cluster="cluster-b")
    other = Concluded(idle.klass, idle.entity, idle.owner, (), 0.0, "", "cluster-a")
    story2 = dataclasses.replace(story, truth=[elsewhere])
    assert score(story2, (other,))[0].got is None


def test_a_crash_loop_read_from_raw_files_survives_the_late_events_replay() -> None:
    """Seed 39 (a crash loop on one GPU, raw files in shuffled order): a late event replays
    the detector, the replay opens the blamed incident under a new id and renames it onto
    the one the log holds; the blame must follow the rename (it kept the replay's id, and
    the next failure on the GPU raised KeyError). One gpu_hardware incident holds the job's
    three failed attempts."""
    story = stories.generate(39)
    assert story.pattern == "crash_loop"
    got = stories.answer(stories.run(stories.deliveries(story, which=("raw",))["raw"]))
    gpu = [a for a in got if a.klass == "gpu_hardware" and a.jobs]
    assert [(a.entity, len(a.jobs)) for a in gpu] == [("node-021/gpu7", 3)], got
