"""The truth's GPU time, computed from what really happened (the story's `Run`s), apart
from the engine: one line of intervals per job (DESIGN §9, "GPU time lost is counted
once"), each charged once.

    held & productive   steps that were kept (the next attempt resumed past them)
    held & thrown away  steps after the checkpoint the next attempt resumed from, to the
                        failure's first symptom (a hang included): charged to that failure;
                        a rerun that fell back further (its load failed, or the newest save
                        never finished) throws earlier kept steps away too
    held & restarting   the next attempt's start until its first step, after a failure:
                        charged to the failure (after a preemption: no one's)
    held & waiting      the failure's symptom until the scheduler ended the attempt, and the
                        wait for the next attempt while the job's allocation was held
                        (pending `Resources`, or no mark at all): charged to the failure
    not held            the wait the scheduler queued the job (`Priority`, after a
                        preemption), and the gap of a job that ended FAILED without a
                        requeue until its owner resubmitted it (time-to-train delay)
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

from bench.story_model import Run

HELD_REASONS = frozenset({"Resources"})


@dataclass
class _Work:
    run: Run
    start: datetime
    end: datetime


def _checkpoint_time(runs: list[Run], step: int | None, before: datetime) -> datetime | None:
    """When the checkpoint of `step` the lineage wrote finished (the latest before `before`)."""
    if step is None:
        return None
    times = [s.finished for r in runs for s in r.saves
             if s.step == step and s.finished is not None and s.finished <= before]
    return max(times) if times else None


def charges(lineage: list[Run]) -> dict[str, float]:
    """GPU-hours charged to each failed attempt of one job's lineage (its attempts in time
    order, a resubmission under a new job id included), by the attempt's key."""
    runs = sorted(lineage, key=lambda r: r.start)
    seconds: dict[str, float] = defaultdict(float)
    live: list[_Work] = []
    for i, run in enumerate(runs):
        nxt = runs[i + 1] if i + 1 < len(runs) else None
        if run.resumed is not None:
            live.append(_Work(run, run.resumed, run.symptom or run.end or run.resumed))
        if run.symptom is None or run.end is None:
            continue
        key = run.key
        # thrown away: the live work after the checkpoint the next attempt resumed from
        kept_until = _checkpoint_time(runs, nxt.restored if nxt else None, run.symptom)
        still: list[_Work] = []
        for work in live:
            cut = work.start if kept_until is None else max(work.start, kept_until)
            if cut < work.end:
                seconds[key] += work.run.gpus * (work.end - cut).total_seconds()
                if cut > work.start:
                    still.append(_Work(work.run, work.start, cut))
            else:
                still.append(work)
        live = still
        # held after the symptom until the attempt ended
        seconds[key] += run.gpus * (run.end - run.symptom).total_seconds()
        if nxt is None:
            continue
        # the wait: held while the scheduler held the allocation for it
        if run.requeued and run.outcome != "preempted":
            marks = [*run.pending, (nxt.start, "")]
            held_since: datetime | None = run.end
            for at, reason in marks:
                if held_since is not None:
                    seconds[key] += run.gpus * (at - held_since).total_seconds()
                held_since = at if reason in HELD_REASONS else None
        # restarting: the next attempt's start-up, after a failure
        if nxt.after == "failure" and nxt.resumed is not None:
            seconds[key] += nxt.gpus * (nxt.resumed - nxt.start).total_seconds()
    return {key: value / 3600 for key, value in seconds.items()}
