"""The job's GPU line (processors/gpu_time.py): each stretch of GPU time charged once, however
many attempts fail (issue 41, capability 2), and checkpoints that say where a job resumed
(capability 3). Worked stories are checked against hand-computed figures; random stories of
1-5 attempts against the invariants."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from processors.gpu_time import COUNTED, Run, charges, line
from processors.incidents.impact import queued

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def three_failures() -> list[Run]:
    """16 GPUs. Attempt 1: first step 2m, checkpoint 500 at 10m, fails 20m, requeued;
    attempt 2 starts 21m, restores 500, first step 23m, fails 30m, requeued; attempt 3
    starts 31m, restores 500, first step 33m; attempt 4 after attempt 3 fails at 40m with
    checkpoint 700 at 37m."""
    return [
        Run(1, 16, at(0), ended_at=at(20), failed_at=at(20), first_step_at=at(2),
            first_step=10, checkpoints=((500, at(10)),), requeued=True),
        Run(2, 16, at(21), ended_at=at(30), failed_at=at(30), first_step_at=at(23),
            first_step=510, restored_step=500, requeued=True),
        Run(3, 16, at(31), ended_at=at(40), failed_at=at(40), first_step_at=at(33),
            first_step=510, restored_step=500, checkpoints=((700, at(37)),), requeued=True),
        Run(4, 16, at(42), first_step_at=at(44), first_step=710, restored_step=700),
    ]


def test_three_failures_each_charged_its_own_stretches_once() -> None:
    got = charges(three_failures(), at(60), queued)
    # failure 1: rework 10m->20m, held 20m->21m, restart 21m->23m
    assert (got[1].rework_s, got[1].downtime_s, got[1].restore_s) == (600, 60, 120)
    # failure 2: its work 23m->30m (its start-up is failure 1's restart), held 30m->31m,
    # restart 31m->33m
    assert (got[2].rework_s, got[2].downtime_s, got[2].restore_s) == (420, 60, 120)
    # failure 3: checkpoint 37m -> 40m, held 40m->42m, restart 42m->44m
    assert (got[3].rework_s, got[3].downtime_s, got[3].restore_s) == (180, 120, 120)
    assert round(got[1].gpu_hours, 6) == round(16 * 780 / 3600, 6) == 3.466667
    assert round(got[2].gpu_hours, 6) == round(16 * 600 / 3600, 6) == 2.666667
    assert round(got[3].gpu_hours, 6) == round(16 * 420 / 3600, 6) == 1.866667
    assert [got[k].resumed_step for k in (1, 2, 3)] == [500, 500, 700]


def test_a_failure_without_a_requeue_holds_nothing_until_resubmitted() -> None:
    """Attempt 1 ended FAILED at 20m, nobody requeued it; the user resubmitted at 80m and it
    started at 90m: 70 min of time-to-train delay, not GPU-hours."""
    runs = [Run(1, 8, at(0), ended_at=at(20), failed_at=at(19), first_step_at=at(1),
                first_step=1, checkpoints=((100, at(10)),)),
            Run(2, 8, at(90), submitted_at=at(80), first_step_at=at(92), first_step=110,
                restored_step=100)]
    got = charges(runs, at(100), queued)[1]
    assert (got.rework_s, got.downtime_s, got.restore_s, got.unheld_s) == (540, 60, 120, 4200)
    assert round(got.gpu_hours, 6) == round(8 * 720 / 3600, 6)
    requeued = [runs[0].__class__(**{**runs[0].__dict__, "requeued": True}), runs[1]]
    held = charges(requeued, at(100), queued)[1]
    assert (held.downtime_s, held.unheld_s) == (60 + 4200, 0)


def test_a_rerun_below_the_checkpoint_fell_back_and_the_loss_grows() -> None:
    """Checkpoint 2000 at 30m was truncated: attempt 2's load failed and its first logged step
    is 1010, so it resumed from checkpoint 1000 (saved at 15m): 15m->30m of kept work is
    thrown away too, and the steps lost are 2250 - 1000."""
    runs = [Run(1, 512, at(0), ended_at=at(40), failed_at=at(40), first_step_at=at(1),
                first_step=1, checkpoints=((1000, at(15)), (2000, at(30))), requeued=True),
            Run(2, 512, at(42), first_step_at=at(45), first_step=1010, restored_step=2000,
                restore_failed=True)]
    got = charges(runs, at(50), queued)[1]
    assert got.resumed_step == 1000
    assert got.rework_s == 25 * 60  # 15m -> 40m
    trusted = [runs[0], Run(2, 512, at(42), first_step_at=at(45), first_step=2010,
                            restored_step=2000)]
    assert charges(trusted, at(50), queued)[1].rework_s == 10 * 60  # 30m -> 40m


def test_a_save_that_only_started_is_a_checkpoint_once_a_rerun_restores_it() -> None:
    runs = [Run(1, 8, at(0), ended_at=at(40), failed_at=at(40), first_step_at=at(1),
                first_step=1, checkpoints=((1000, at(15)),), started_saves=((2000, at(30)),),
                requeued=True),
            Run(2, 8, at(42), first_step_at=at(45), first_step=1010, restored_step=1000)]
    # from 15m: the save of 2000 never finished
    assert charges(runs, at(50), queued)[1].rework_s == 25 * 60
    restored = [runs[0], Run(2, 8, at(42), first_step_at=at(45), first_step=2010,
                             restored_step=2000)]
    assert charges(restored, at(50), queued)[1].rework_s == 10 * 60  # it was written after all


def test_an_attempt_that_failed_before_its_first_step_is_the_previous_failure_s_restart() -> None:
    runs = [Run(1, 8, at(0), ended_at=at(20), failed_at=at(20), first_step_at=at(1),
                first_step=1, checkpoints=((100, at(10)),), requeued=True),
            Run(2, 8, at(21), ended_at=at(24), failed_at=at(24), restored_step=100,
                restore_failed=True, requeued=True),
            Run(3, 8, at(25), first_step_at=at(27), first_step=110, restored_step=100)]
    got = charges(runs, at(30), queued)
    assert (got[1].rework_s, got[1].downtime_s, got[1].restore_s) == (600, 60, 180)
    assert (got[2].rework_s, got[2].downtime_s, got[2].restore_s) == (0, 60, 120)


def test_after_a_preemption_only_the_rework_counts() -> None:
    runs = [Run(1, 8, at(0), ended_at=at(20), failed_at=at(20), first_step_at=at(1),
                first_step=1, checkpoints=((100, at(10)),), preempted=True),
            Run(2, 8, at(50), first_step_at=at(52), first_step=110, restored_step=100)]
    got = charges(runs, at(60), queued)[1]
    assert (got.rework_s, got.downtime_s, got.restore_s, got.queue_s) == (600, 0, 0, 1800)


# --- random stories ----------------------------------------------------------------------


@st.composite
def stories(draw: st.DrawFn) -> tuple[list[Run], datetime]:
    n = draw(st.integers(1, 5))
    runs: list[Run] = []
    clock = 0.0
    saved: list[tuple[int, datetime]] = []
    step = 0
    for k in range(1, n + 1):
        start = clock + draw(st.floats(0, 30))
        gpus = draw(st.sampled_from([1, 8, 16, 512]))
        up = draw(st.floats(0, 10))
        length = draw(st.floats(up + 1, up + 120))
        last = k == n
        fails = not last or draw(st.booleans())
        own = []
        for _ in range(draw(st.integers(0, 3))):
            step += draw(st.integers(1, 500))
            t = at(start + draw(st.floats(up, length)))
            own.append((step, t))
        restored = None
        first = None
        if k > 1 and saved:
            choice = draw(st.sampled_from(saved))
            restored = choice[0]
            first = restored + draw(st.integers(-300, 50))
            first = max(first, 0)
        ended = at(start + length) if draw(st.booleans()) or not last else None
        runs.append(Run(
            k, gpus, at(start), ended_at=ended,
            failed_at=at(start + length - draw(st.floats(0, 1))) if fails else None,
            first_step_at=at(start + up) if draw(st.booleans()) else None,
            first_step=first if first is not None else (step if k == 1 else None),
            checkpoints=tuple(sorted(own, key=lambda c: c[1])), restored_step=restored,
            restore_failed=draw(st.booleans()) if restored is not None else False,
            requeued=draw(st.booleans()), preempted=draw(st.booleans()),
            submitted_at=at(start - 1) if draw(st.booleans()) else None,
            pending=((at(start - 0.5), draw(st.sampled_from(["Resources", "Priority"]))),)
            if draw(st.booleans()) else ()))
        saved += own
        clock = start + length
    return runs, at(clock + draw(st.floats(0, 60)))


@settings(max_examples=300, deadline=None)
@given(stories())
def test_no_stretch_of_gpu_time_is_charged_twice(story: tuple[list[Run], datetime]) -> None:
    runs, now = story
    intervals = line(runs, now, queued)
    by_track: dict[int, list] = {}
    for iv in intervals:
        assert iv.end > iv.start
        assert iv.start >= min(r.started_at for r in runs) and iv.end <= now
        by_track.setdefault(iv.track, []).append(iv)
    for track, ivs in by_track.items():
        ivs.sort(key=lambda iv: iv.start)
        for a, b in itertools.pairwise(ivs):
            assert a.end <= b.start, f"track {track}: {a} overlaps {b}"
        run = next(r for r in runs if r.attempt == track)
        assert ivs[0].start == run.started_at
    # charged GPU time never exceeds the GPUs x the time each attempt's GPUs were held (its
    # start to the next attempt's start, or now: attempts here never overlap)
    ordered = sorted(runs, key=lambda r: r.started_at)
    held = sum(r.gpus * ((ordered[i + 1].started_at if i + 1 < len(ordered) else now)
                         - r.started_at).total_seconds() / 3600
               for i, r in enumerate(ordered))
    counted = sum(iv.gpus * iv.seconds / 3600 for iv in intervals if iv.kind in COUNTED)
    assert counted <= held + 1e-9
    got = charges(runs, now, queued)
    assert abs(sum(c.gpu_hours for c in got.values()) - counted) < 1e-6
    for c in got.values():
        assert min(c.rework_s, c.downtime_s, c.restore_s, c.queue_s, c.unheld_s) >= 0
    # every interval is charged to a failure that happened before it ends
    failures = {r.attempt: r.failed_at for r in runs if r.failed_at is not None}
    for iv in intervals:
        if iv.charged is not None:
            assert iv.charged in failures
