"""Severity from impact and whether the cluster is at fault: the highest level whose GPU or
lost GPU-hour threshold the incident meets, then one level up for each of a high-priority
job, a repeat on the same entity and, when the cluster is at fault, no restart within the
deadline (capped at sev1). An incident the cluster is not at fault for (the job's own, a
preemption) is at most `severity.not_at_fault_max`. A fault that keeps coming back raises it
one level per recurrence, at most two (`recurrences`). Every change says why."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from schemas import incident_events as ev

if TYPE_CHECKING:
    from processors.incidents.aggregate import Incident
    from processors.incidents.context import Context

ORDER = ("sev4", "sev3", "sev2", "sev1")
_FAULT = {"job": "the job's own failure", "scheduler": "the scheduler's decision",
          "planned": "planned work"}


def assess(ctx: Context, inc_id: str, time: datetime, rule: str) -> None:
    inc = ctx.book.incidents[inc_id]
    cfg = ctx.rules.severity
    level = 0
    reasons: list[str] = []
    for item in cfg.levels:
        if inc.gpus >= item.min_gpus and inc.lost_gpu_hours >= item.min_lost_gpu_hours:
            idx = ORDER.index(item.severity)
            if idx > level:
                level = idx
                reasons = [f"{item.severity} from impact: " + (
                    f"{inc.gpus} GPUs >= {item.min_gpus}" if item.min_gpus else
                    f"{inc.lost_gpu_hours:.1f} GPU-hours lost >= {item.min_lost_gpu_hours:g}")]
    priorities = [a.priority for j in inc.jobs.values()
                  if (a := ctx.book.attempt((j.project, j.job_id, j.attempt))) and a.priority]
    if priorities and max(priorities) >= cfg.high_priority:
        level, reasons = level + 1, [*reasons, "high-priority job"]
    repeats, said = recurrences(ctx, inc)
    if cfg.raise_on_repeat and repeats:
        level, reasons = level + min(repeats, MAX_REPEAT_RAISE), [
            *reasons, f"repeated on the same entity ({said})"]
    fault = ctx.rules.klass(inc.klass).at_fault
    if cfg.raise_on_no_restart and "no_restart" in inc.flags and fault == "cluster":
        level, reasons = level + 1, [*reasons, "no restart within the deadline"]
    cap = ORDER.index(cfg.not_at_fault_max)
    if fault != "cluster" and level > cap:
        level, reasons = cap, [*reasons, f"at most {cfg.not_at_fault_max}: the cluster is not "
                                         f"at fault ({_FAULT[fault]})"]
    severity = ORDER[min(level, 3)]
    why = "; ".join(reasons) or "below every threshold"
    if severity != inc.severity or not inc.severity_why or (
            repeats and why != inc.severity_why):
        ctx.book.emit(inc_id, ev.SeverityChanged(severity=severity, why=why), time, rule,
                      f"severity:{severity}:{why}")


MAX_REPEAT_RAISE = 2
"""Levels a fault that keeps coming back raises its incident at most (sev3 -> sev1)."""


def recurrences(ctx: Context, inc: Incident) -> tuple[int, str]:
    """How many times the same fault came back, and how: attempts of one job that failed
    of it again after the first (a crash loop, a regression on every restart), and earlier
    incidents on the same node within the repeat-offender window (the GPU that failed a job
    an hour ago fails the next one). A signal seen again after a restart counts once."""
    by_job = Counter((j.project, j.job_id) for j in inc.jobs.values() if j.role == "failed")
    again = sum(n - 1 for n in by_job.values())
    prior = 0
    if inc.key.startswith("node:") and inc.opened_at is not None:
        node = inc.key[5:]
        since = inc.opened_at - timedelta(seconds=ctx.rules.repeat_offender_window_s)
        known = ctx.book.incidents.knows
        prior = len({t.split("/", 1)[0] for t, at in ctx.book.node_incidents.get(node, {}).items()
                     if t.split("/", 1)[0] != inc.id and since <= at < inc.opened_at
                     and known(t.split("/", 1)[0])})
    if again >= prior and again:
        return again, f"{again + 1} failed attempts of the same job"
    if prior:
        return prior, f"incident {prior + 1} on {inc.key[5:]} in " \
                      f"{ctx.rules.repeat_offender_window_s / 86400:.0f} days"
    return (1, "again after a restart") if "repeat" in inc.flags else (0, "")


def flag(ctx: Context, inc_id: str, name: str, time: datetime, rule: str, detail: str) -> None:
    if ctx.book.emit(inc_id, ev.SignalAdded(flag=name, detail=detail), time, rule,
                     f"flag:{name}:{detail}"):
        assess(ctx, inc_id, time, rule)
