"""Progress that stops or slows: hangs and fail-slow, raised as symptoms by the rules'
`progress` section, on event time (the watermark), never the wall clock."""

from __future__ import annotations

import statistics
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from processors.incidents import cause
from processors.incidents.book import AttemptKey, Progress, akey
from processors.incidents.rules import SymptomRule
from schemas.events import Event

if TYPE_CHECKING:
    from processors.incidents.detector import Detector


def arm_hang(d: Detector, progress: Progress, key: AttemptKey) -> None:
    """One pending hang timer per attempt; it re-arms itself when progress moved on."""
    if not progress.hang_armed and progress.last_step_at is not None:
        progress.hang_armed = True
        d.book.push_timer(progress.last_step_at + timedelta(
            seconds=d.rules.progress.hang.after_s), "hang", "", key)


def hang(d: Detector, when: datetime, key: AttemptKey) -> None:
    book = d.book
    progress = book.progress.get(key)
    attempt = book.attempt(key)
    if progress is None or progress.last_step_at is None:
        return
    progress.hang_armed = False
    cfg = d.rules.progress.hang
    if progress.last_step_at + timedelta(seconds=cfg.after_s) > when:
        arm_hang(d, progress, key)  # progress moved on since this timer was set
        return
    if attempt is not None and attempt.outcome:
        return  # the attempt ended; its end is the symptom, not a hang
    if book.active(key) is not None:
        return
    rule = SymptomRule.model_validate(
        {"name": "hang", "types": ["job.step"], "class": cfg.klass, "rank": cfg.rank,
         "why": f"no progress for {cfg.after_s / 60:.0f} min after step {progress.last_step}"})
    cause.on_symptom(d, None, rule, key, when, f"hang:{progress.last_step_event}")


def fail_slow(d: Detector, event: Event, key: AttemptKey, progress: Progress,
              step_time: float) -> None:
    cfg = d.rules.progress.fail_slow
    if len(progress.step_times) < cfg.baseline_steps:
        progress.step_times.append(step_time)
        return
    baseline = statistics.median(progress.step_times)
    if step_time <= baseline * cfg.ratio:
        progress.slow_since = None
        return
    progress.slow_since = progress.slow_since or event.time
    if progress.slow_reported or (event.time - progress.slow_since).total_seconds() < cfg.for_s:
        return
    if d.book.active(key) is not None:
        return
    progress.slow_reported = True
    rule = SymptomRule.model_validate(
        {"name": "fail-slow", "types": ["job.step"], "class": cfg.klass, "rank": cfg.rank,
         "why": f"step time {step_time:.2f} s is above {cfg.ratio:g} x the baseline "
                f"{baseline:.2f} s for {cfg.for_s / 60:.0f} min with no error"})
    # localise: any signal in the fault domain since shortly before it slowed down
    since = progress.slow_since - timedelta(seconds=d.rules.cause_window_s)
    cause.on_symptom(d, event, rule, key, event.time, f"slow:{akey(key)}", since)
