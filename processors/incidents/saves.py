"""Checkpoints an attempt wrote, as the detector remembers them: a save that finished is a
checkpoint; one that only started is a checkpoint only if a rerun restores it; a save that
failed, or a restore that failed, is not (DESIGN §9: "a checkpoint is one whose save
completed; a rerun's own logged steps say where it resumed"). The job's GPU line
(`processors/gpu_time.py`) reads them from the attempt's `Progress`."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from processors.incidents.book import Progress

SAVES_KEPT = 32
"""Checkpoints remembered per attempt (the newest): a fallback further back than that many
saves is charged from the oldest kept."""


def saved(progress: Progress, step: int, time: datetime) -> None:
    progress.saved = sorted({*progress.saved, (step, time)}, key=lambda s: s[1])[-SAVES_KEPT:]
    progress.started_saves = [s for s in progress.started_saves if s[0] != step]


def started(progress: Progress, step: int, time: datetime) -> None:
    if any(s == step for s, _ in progress.saved):
        return  # its end arrived first
    progress.started_saves = sorted({*progress.started_saves, (step, time)},
                                    key=lambda s: s[1])[-SAVES_KEPT:]


RESTORE_OPERATIONS = frozenset({"restore", "load", "resume"})


def failed(progress: Progress, attrs: dict[str, Any], time: datetime) -> None:
    """A failed checkpoint: a failed load means the rerun did not resume from what it
    loaded; a failed write of a step takes that step out of the checkpoints (a save that
    said it finished, then an I/O error for it, is no checkpoint)."""
    operation = str(attrs.get("operation") or "")
    step = attrs.get("step")
    if operation in RESTORE_OPERATIONS:
        progress.restore_failed = True
        return
    if not isinstance(step, int) or isinstance(step, bool):
        return
    progress.started_saves = [s for s in progress.started_saves if s[0] != step]
    kept = [s for s in progress.saved if s[0] != step]
    if len(kept) != len(progress.saved):
        progress.saved = kept
        progress.ckpt_step, progress.ckpt_at = kept[-1] if kept else (None, None)
