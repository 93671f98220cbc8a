"""Checkpoint saves and loads in the frameworks' own words (part of the training-log adapter,
`ingest/nccl.py`): a save that started is not a checkpoint until the framework says it
finished, and one an error interrupted is a failed checkpoint.

- DeepSpeed: started `[Torch] Checkpoint global_step500 is about to be saved!`, `Saving model
  checkpoint: <path>`, `[Torch] Saving <path>...`; finished `[Torch] Checkpoint
  global_step500 is ready now!`; load `[Torch] Loading checkpoint from <path>...`;
- Megatron-LM: started `saving checkpoint at iteration N to <dir>`; finished `successfully
  saved checkpoint at iteration N to <dir>`; load `successfully loaded checkpoint from <dir>
  ... at iteration N`;
- NeMo 2: started `Scheduled async checkpoint save for <path>`; finished `Global Checkpoint
  Save : ... Iteration: N : ... Save duration` (a synchronous save), `Successfully saved
  checkpoint from iteration N to <path>`, `Async checkpoint save for step N (<path>)
  finalized successfully`; load `Restoring model weights from RestoreConfig(path=...)`;
- Lightning: started `... saving model to '<path>' as top 1`; it never says a save
  finished (a checkpoint once a rerun restores it); load `Restoring states from the
  checkpoint path at <path>`;
- HF Trainer: started `Saving model checkpoint to <dir>/checkpoint-N`; finished `Model
  weights saved in <dir>/checkpoint-N/...` (or DeepSpeed's `is ready now!`).

A file's saves are decided when it has been read: finished -> `checkpoint.saved`; an
exception line while the save was under way (or naming its path after it finished) ->
`checkpoint.failed` (operation `save`); never finished -> `checkpoint.started` (the
detector counts it as a checkpoint only if a rerun restores that step). An exception while
a load was under way (a truncated shard, a load error), before any progress line ->
`checkpoint.failed` with operation `restore`: the rerun did not resume from it. The step is
the line's (`iteration N`, `global_stepN`, `checkpoint-N`, `step=N`) or its path's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_STEP_IN = re.compile(r"(?:global[ _]step|step|checkpoint|iter(?:ation)?)[=_ -]?(?P<step>\d+)",
                      re.I)
_DS_TAG = re.compile(r"\[Torch\] Checkpoint (?P<tag>\S+) is (?P<what>about to be saved|ready "
                     r"now)!")
_DS_SAVING = re.compile(r"(?:Saving model checkpoint: |\[Torch\] Saving )(?P<path>[^\s.][^\s]*?)"
                        r"(?:\.\.\.)?$")
_MEGATRON = re.compile(r"(?P<done>successfully )?saved? checkpoint (?:from|at) iteration\s+"
                       r"(?P<step>\d+) to (?P<path>\S+)", re.I)
_NEMO_SYNC = re.compile(r"Global Checkpoint Save : Rank: (?P<rank>\d+) : Iteration: "
                        r"(?P<step>\d+) : Start time: [\d.]+s : Save duration: "
                        r"(?P<dur>[\d.]+)s")
_NEMO_ASYNC = re.compile(r"Scheduled async checkpoint save for (?P<path>\S+)")
_NEMO_DONE = re.compile(r"Async checkpoint save for step (?P<step>\d+) \((?P<path>[^)\s]+)\) "
                        r"finalized successfully")
_LIGHTNING = re.compile(r"saving model to '?(?P<path>[^'\s]+)'?")
_HF_SAVING = re.compile(r"Saving (?:model )?checkpoint(?: to|:) '?(?P<path>[^'\s]+)'?", re.I)
_HF_DONE = re.compile(r"Model weights saved in (?P<path>\S+)")
_SAVED_TO = re.compile(r"saved checkpoint to '?(?P<path>[^'\s]+)'?", re.I)


@dataclass
class Save:
    step: int
    path: str
    line: str
    index: int
    finished: bool = False
    duration_s: float | None = None
    closed: bool = False
    """A load came after it: an error now is not this save's."""
    at: int = 0
    """Where its start is among the file's records (it is put there once decided)."""
    done_at: int = 0
    done_line: str = ""
    done_index: int = -1
    """The last line that said it finished (every rank's commit, then Megatron's `successfully
    saved`: the checkpoint is whole at the last)."""


@dataclass
class Saves:
    """The saves and loads of one file as it is read."""

    saves: dict[int, Save] = field(default_factory=dict)
    loading: tuple[int, str] | None = None
    """The load under way (step, path): no progress line since."""
    failed: set[int] = field(default_factory=set)


def step_of(*texts: str) -> int | None:
    for text in texts:
        if text and (m := _STEP_IN.search(text)):
            return int(m.group("step"))
    return None


def _dir(path: str) -> str:
    """A checkpoint's directory: DeepSpeed and HF write files under `global_stepN/`,
    `checkpoint-N/`; the file itself otherwise."""
    parts = path.rstrip("/").split("/")
    for i, part in enumerate(parts):
        if _STEP_IN.fullmatch(part) or re.fullmatch(r"(?:global_step|checkpoint-|iter_)\d+",
                                                    part):
            return "/".join(parts[:i + 1])
    return path


def save_line(line: str) -> tuple[str, int | None, str, float | None] | None:
    """(`started` | `finished`, step, path, duration) of a line about a save, or None."""
    if m := _DS_TAG.search(line):
        return ("finished" if m.group("what") == "ready now" else "started",
                step_of(m.group("tag")), "", None)
    if m := _MEGATRON.search(line):
        done = bool(m.group("done")) or "successfully" in line
        return ("finished" if done else "started", int(m.group("step")),
                m.group("path").rstrip(".,"), None)
    if m := _NEMO_SYNC.search(line):
        return "finished", int(m.group("step")), "", float(m.group("dur"))
    if m := _NEMO_DONE.search(line):
        return "finished", step_of(m.group("path")) or int(m.group("step")), m.group("path"), \
            None
    if m := _NEMO_ASYNC.search(line):
        return "started", step_of(m.group("path")), m.group("path"), None
    if m := _HF_DONE.search(line):
        path = m.group("path")
        return "finished", step_of(_dir(path)), _dir(path), None
    if m := _DS_SAVING.search(line.rstrip()):
        path = m.group("path")
        return "started", step_of(path), _dir(path), None
    if (m := _SAVED_TO.search(line)) and not _HF_SAVING.search(line):
        path = m.group("path").rstrip(".")
        return "finished", step_of(line[:m.start()], path), path, None
    if m := _LIGHTNING.search(line):
        path = m.group("path").rstrip(".")
        return "started", step_of(line[:m.start()], path), path, None
    if m := _HF_SAVING.search(line):
        path = m.group("path").rstrip(".")
        return "started", step_of(line[:m.start()], path), path, None
    return None


def nemo_async(text: str) -> set[int]:
    """Steps NeMo saves asynchronously in this file (its `Global Checkpoint Save` line then
    says the state was staged, not written: the save finishes when it is finalized)."""
    return {s for m in _NEMO_ASYNC.finditer(text) if (s := step_of(m.group("path"))) is not None}


def started(saves: Saves, step: int, path: str, line: str, index: int, at: int) -> None:
    if step not in saves.saves:
        saves.saves[step] = Save(step, path, line, index, at=at)
    elif path and not saves.saves[step].path:
        saves.saves[step].path = path


def finished(saves: Saves, step: int, path: str, line: str, index: int,
             duration_s: float | None = None, at: int = 0) -> None:
    """A line said the save of `step` finished (the last such line is its time)."""
    save = saves.saves.get(step)
    if save is None:
        save = saves.saves[step] = Save(step, path, line, index, at=at)
    save.finished = True
    save.path = save.path or path
    save.done_line, save.done_index, save.done_at = line, index, at
    if duration_s is not None:
        save.duration_s = duration_s


def interrupted(saves: Saves, text: str) -> list[tuple[Save, str]]:
    """The saves an exception line ends: every save under way, and a finished one whose
    path the error names (an I/O error on it). (save, operation) pairs, once each."""
    out = []
    for save in saves.saves.values():
        if save.step in saves.failed:
            continue
        if (not save.finished and not save.closed) or (save.path and save.path in text):
            saves.failed.add(save.step)
            out.append((save, "save"))
    return out


def decided(saves: Saves) -> list[tuple[str, Save]]:
    """What the file says of each save it names, in file order: `saved` (it finished, no
    error followed) or `started` (it never said it finished, nor failed)."""
    out = [("saved" if s.finished else "started", s) for s in saves.saves.values()
           if s.step not in saves.failed]
    return sorted(out, key=lambda o: o[1].done_index if o[0] == "saved" else o[1].index)


def loaded(saves: Saves, step: int, path: str) -> None:
    """A load: the saves before it are no longer under way, and an error before the next
    step may be this load's."""
    for save in saves.saves.values():
        save.closed = True
    saves.loading = (step, path)


_LOAD_ERROR = re.compile(r"checkpoint|load|unpickl|zip archive|PytorchStreamReader|safetensor|"
                         r"EOFError|Ran out of input|No such file|corrupt|truncat|deserializ|"
                         r"state_dict|mp_rank|Missing key|size mismatch", re.I)


def load_error(text: str, path: str) -> bool:
    """Whether an exception reads as the load's own failure (a truncated or missing shard, a
    state that does not fit), not another one (an OOM after the load)."""
    return bool(_LOAD_ERROR.search(text)) or bool(path and path in text)
