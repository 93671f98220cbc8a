"""Where a training log's events are collected (part of the training-log adapter,
`ingest/nccl.py`, which feeds it line by line): one record per event (a checkpoint seen in two
lines is one, a step already read is merged), and the time of a line that prints none: the
nearest timed line of the same file, before it else after it, with the interval it lies in.
"""

from __future__ import annotations

from typing import Any

from ingest import slurm_output, training_steps, training_text
from ingest.base import Context, Reject, raw_evidence
from ingest.redact import clip
from ingest.timestamps import between


def _time(line: str, ctx: Context) -> tuple[str, str]:
    from ingest.timestamps import local_time, read

    if (nemo := training_text.nemo_time(line)) is not None:
        return local_time(nemo, ctx), "line"
    if (stated := slurm_output.stated_time(line)) is not None:  # `CANCELLED AT <t>`
        return local_time(stated, ctx), "line"
    stamp = read(line.strip(), ctx)
    return stamp.time, stamp.source


_NEIGHBOURS = 200
"""How far (lines) an untimed line looks for a timed neighbour in its file."""


class _Lines:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.out: list[dict[str, Any] | Reject] = []
        self.fallback: tuple[str, str] | None = None
        """The time (and its source) of the nearest stamped piece before this one on the
        same physical line."""
        self.checkpoints: set[tuple[str, int, str]] = set()
        self.progress = training_steps.Progress()
        self.earlier_only: set[int] = set()
        """Records (by id) that may take a time from a line before theirs, never after: a
        bar is drawn after what it counts, so a later line's time is not its time."""
        self.index = 0
        """The line being read (0-based): a record without a time of its own remembers it."""
        self.untimed: list[tuple[dict[str, Any], int]] = []
        self.slurm: dict[tuple[str, ...], dict[str, Any]] = {}
        """Slurm's own lines already recorded, by `Finding.key`."""

    def emit(self, line: str, type_: str, attributes: dict[str, Any], *, severity: str = "info",
             scope: str | None = None, entity: str | None = None, node: str | None = None,
             time: str | None = None) -> None:
        if type_.startswith("checkpoint.") and isinstance(attributes.get("step"), int):
            path = str(attributes.get("path") or "")
            if "rank" in path.rsplit("/", 1)[-1]:
                path = path.rsplit("/", 1)[0]  # DeepSpeed's files of one checkpoint, per rank
            key = (type_, attributes["step"], path)
            if key in self.checkpoints:
                return  # the same checkpoint in another line (NeMo's async finalisation,
                # DeepSpeed's one load per rank file)
            self.checkpoints.add(key)
            if type_ == "checkpoint.restored":
                self.progress.restart()
        when, source = (time, "line") if time else _time(line, self.ctx)
        if source == "observed" and self.fallback:
            when, source = self.fallback
        record: dict[str, Any] = {
            "type": type_, "time": when, "severity": severity, "project": self.ctx.project,
            "job_id": self.ctx.job_id, "message": clip(line.strip(), 500),
            "attributes": {**attributes, "time_source": source, "raw": raw_evidence(line)},
        }
        if self.ctx.attempt is not None:
            record["attempt"] = self.ctx.attempt
        node = node or self.ctx.node or None
        record.update({k: v for k, v in (("scope", scope), ("entity", entity), ("node", node))
                       if v})
        if type_ == "job.step" and self.progress.merge(record):
            return  # a step already read (a bar redrawn, a step's second log line)
        if source == "observed":
            self.untimed.append((record, self.index))
            if type_ == "job.step":
                self.earlier_only.add(id(record))
        self.out.append(record)

    def place(self, lines: list[str]) -> None:
        """A line that prints no time (Megatron's checkpoint save and load lines) takes the
        time of the nearest timed line before it in the same file, else the one after it,
        and says so (`time_source` previous_line / next_line, `time_from_line`); never the
        time it was read, unless the file has no timed line near it."""
        cache: dict[int, str | None] = {}

        def timed(n: int) -> str | None:
            if n not in cache:
                when, source = _time(lines[n], self.ctx)
                cache[n] = when if source != "observed" else None
            return cache[n]

        for record, index in self.untimed:
            if record["attributes"].get("time_source") != "observed":
                continue  # a later line of the same step gave it its time
            before, after = between(index, len(lines), timed, _NEIGHBOURS)
            if id(record) in self.earlier_only:
                after = None  # a bar is drawn after what it counts: never a later line's
            for where, found in (("previous_line", before), ("next_line", after)):
                if found is not None:
                    record["time"] = cache[found]
                    record["attributes"].update(time_source=where, time_from_line=found + 1)
                    break
            if before is not None and after is not None and cache[before] != cache[after]:
                # it happened in between: the order against other sources is uncertain
                record["attributes"].update(time_lower=cache[before], time_upper=cache[after])
