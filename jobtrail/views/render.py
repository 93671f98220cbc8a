"""Render a job's cross-system timeline for a terminal.

Grouped by attempt, one colour per source, times relative to the attempt's start (or its
first row), each row ending with the incident it is evidence of (`[inc-…]`), and bursts
collapsed: 64 NCCL timeouts within a few seconds are one line that
says x64 and names the first and last entity, because that is how an on-call engineer
reads them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from jobtrail.views.terminal import field
from processors.attempts import Attempt

_COLOURS = {
    "scheduler": "\033[35m",  # magenta
    "network": "\033[36m",  # cyan
    "storage": "\033[33m",  # yellow
    "node": "\033[31m",  # red
    "job": "\033[32m",  # green
    "change": "\033[34m",  # blue
    "operator": "\033[37m",
}
_RESET = "\033[0m"
_BOLD = "\033[1m"
_BURST = timedelta(seconds=5)


def _relative(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    sign = "-" if seconds < 0 else "+"
    seconds = abs(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{sign}{hours:d}:{minutes:02d}:{secs:02d}"


def _collapse(rows: Sequence[dict[str, Any]]) -> list[tuple[dict[str, Any], int, str]]:
    """Merge runs of the same (type, relation) within _BURST into (first row, count, last)."""
    out: list[tuple[dict[str, Any], int, str]] = []
    for row in rows:
        if out:
            first, count, _last = out[-1]
            same = (first["type"], first["relation"]) == (row["type"], row["relation"])
            # progress is a run of steps however far apart; other types merge within a burst
            if same and (row["type"] == "job.step" or row["time"] - first["time"] <= _BURST):
                out[-1] = (first, count + 1, row["message"] if row["type"] == "job.step"
                           else row["entity"])
                continue
        out.append((row, 1, row["entity"]))
    return out


def _attempt_header(attempt: Attempt | None, number: int, colour: bool) -> str:
    bold, reset = (_BOLD, _RESET) if colour else ("", "")
    if attempt is None:
        return f"{bold}attempt {number}{reset}"
    parts = [f"{bold}attempt {number}{reset}: {attempt.state}"]
    if attempt.nodes:
        parts.append(f"{len(attempt.nodes)} nodes, {attempt.gpus} GPUs")
    if attempt.queue_wait_s is not None:
        reasons = ", ".join(dict.fromkeys(r for _, r in attempt.pending)) or "-"
        parts.append(f"waited {_relative(timedelta(seconds=attempt.queue_wait_s))[1:]}"
                     f" ({reasons})")
    versions = [v for v in (attempt.image, attempt.code_version, attempt.data_version) if v]
    if versions:
        parts.append(" ".join(versions))
    if attempt.end_reason or attempt.exit_code is not None:
        parts.append(f"exit {attempt.exit_code} {attempt.end_reason}".rstrip())
    return " | ".join(parts)


def render(job_id: str, rows: Sequence[dict[str, Any]], attempts: Sequence[Attempt], *,
           colour: bool = True, width: int = 160,
           incidents: Mapping[str, tuple[str, str]] | None = None,
           completeness: dict[int, dict[str, Any]] | None = None) -> str:
    """The timeline; `incidents` (event id -> incident id and title) names, at the end of
    each row, the incident that row is evidence of, and lists those incidents up top; with
    `completeness` (`jobtrail.views.completeness.of_attempts`), each attempt's header is
    followed by what its sources sent and the gaps."""
    if not rows:
        return f"no timeline rows for {field(job_id)} (check the job id and --project)\n"
    incidents = incidents or {}
    by_attempt: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        by_attempt.setdefault(int(row["attempt"]), []).append(row)
    known = {a.attempt: a for a in attempts}
    lines = [f"timeline of {field(job_id)}: {len(rows)} rows, sources: "
             + ", ".join(sorted({r['source'] for r in rows}))]
    named = sorted({v for r in rows if (v := incidents.get(r.get("event_id", "")))})
    lines += [f"incident {field(i)}: {field(title)} (jobtrail incident show {field(i)})"
              for i, title in named]
    for number in sorted(by_attempt):
        group = by_attempt[number]
        attempt = known.get(number)
        origin: datetime = (attempt.started_at if attempt and attempt.started_at
                            else group[0]["time"])
        lines.append("")
        lines.append(_attempt_header(attempt, number, colour))
        if completeness and number in completeness:
            from jobtrail.views.completeness import summary

            lines.append(f"  {summary(completeness[number])}")
        for row, count, last in _collapse(group):
            source = row["source"]
            start, end = (_COLOURS.get(source, ""), _RESET) if colour else ("", "")
            # every field a producer wrote is shown, never obeyed (`views.terminal`)
            link = field(row["entity"]) if row["relation"] == "self" else (
                f"{row['relation']}: {field(row['link_path'] or row['entity'])}")
            message = field(row["message"])
            if count > 1 and row["type"] == "job.step":
                message = f"{message} .. {field(last)} ({count} progress reports)"
            elif count > 1:
                link = f"{link} .. {field(last)} (x{count})"
            text = (f"{_relative(row['time'] - origin):>10} {row['time']:%H:%M:%S} "
                    f"{start}{source:<9} {row['type']:<20}{end} {link:<34} {message}")
            tag = incidents.get(row.get("event_id", ""))
            suffix = f"  [{field(tag[0])}]" if tag else ""
            lines.append(text[: width + len(start) + len(end) - len(suffix)] + suffix)
    return "\n".join(lines) + "\n"
