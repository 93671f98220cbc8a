"""Severity from impact: the highest level whose GPU or lost GPU-hour threshold the incident
meets, then one level up for each of a high-priority job, a repeat on the same entity and no
restart within the deadline (capped at sev1). Every change says why."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from schemas import incident_events as ev

if TYPE_CHECKING:
    from processors.incidents.context import Context

ORDER = ("sev4", "sev3", "sev2", "sev1")


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
    if cfg.raise_on_repeat and "repeat" in inc.flags:
        level, reasons = level + 1, [*reasons, "repeated on the same entity"]
    if cfg.raise_on_no_restart and "no_restart" in inc.flags:
        level, reasons = level + 1, [*reasons, "no restart within the deadline"]
    severity = ORDER[min(level, 3)]
    if severity != inc.severity or not inc.severity_why:
        why = "; ".join(reasons) or "below every threshold"
        ctx.book.emit(inc_id, ev.SeverityChanged(severity=severity, why=why), time, rule,
                      f"severity:{severity}:{why}")


def flag(ctx: Context, inc_id: str, name: str, time: datetime, rule: str, detail: str) -> None:
    if ctx.book.emit(inc_id, ev.SignalAdded(flag=name, detail=detail), time, rule,
                     f"flag:{name}:{detail}"):
        assess(ctx, inc_id, time, rule)
