"""Severity from impact and whether the cluster is at fault: the highest level whose GPU or
lost GPU-hour threshold the incident meets, then one level up for each of a high-priority
job, a repeat on the same entity and, when the cluster is at fault, no restart within the
deadline (capped at sev1). An incident the cluster is not at fault for (the job's own, a
preemption) is at most `severity.not_at_fault_max`. Every change says why."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from schemas import incident_events as ev

if TYPE_CHECKING:
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
    if cfg.raise_on_repeat and "repeat" in inc.flags:
        level, reasons = level + 1, [*reasons, "repeated on the same entity"]
    fault = ctx.rules.klass(inc.klass).at_fault
    if cfg.raise_on_no_restart and "no_restart" in inc.flags and fault == "cluster":
        level, reasons = level + 1, [*reasons, "no restart within the deadline"]
    cap = ORDER.index(cfg.not_at_fault_max)
    if fault != "cluster" and level > cap:
        level, reasons = cap, [*reasons, f"at most {cfg.not_at_fault_max}: the cluster is not "
                                         f"at fault ({_FAULT[fault]})"]
    severity = ORDER[min(level, 3)]
    if severity != inc.severity or not inc.severity_why:
        why = "; ".join(reasons) or "below every threshold"
        ctx.book.emit(inc_id, ev.SeverityChanged(severity=severity, why=why), time, rule,
                      f"severity:{severity}:{why}")


def flag(ctx: Context, inc_id: str, name: str, time: datetime, rule: str, detail: str) -> None:
    if ctx.book.emit(inc_id, ev.SignalAdded(flag=name, detail=detail), time, rule,
                     f"flag:{name}:{detail}"):
        assess(ctx, inc_id, time, rule)
