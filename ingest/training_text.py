"""Training stdout as it really looks (part of the training-log adapter, `ingest/nccl.py`).

- tqdm redraws its bar after a carriage return, so one physical line holds many bars and,
  glued after them, the log line printed meanwhile; `pieces` splits on `\\r` (and on `^M`,
  how `cat -v` and editors show it when the output is pasted), drops ANSI cursor moves, and
  keeps for each piece its physical line, so a bar without a time takes the time of the
  stamped piece before it on the same line;
- Hugging Face Trainer / DeepSpeed loss dicts (`{'loss': 1.23, 'grad_norm': 0.4,
  'learning_rate': 5e-05, 'epoch': 0.1}`) -> progress at the step of the bar before them
  (the dict has none of its own); a NaN loss is said (`loss_is_nan`), not stored as a number;
- NeMo 2: the `[NeMo I 2025-06-18 21:56:22 nemo_logging:393]` prefix is the line's time;
  `Global Checkpoint Save : Rank: 0 : Iteration: 24 : ... Save duration: 25.537s` is a
  saved checkpoint (with its duration) unless a line naming its path follows (`Successfully
  saved checkpoint from iteration 24 to ...`, `Async checkpoint save for step 25
  (/ckpt/step=24.ckpt) finalized successfully`: the step of the path).
"""

from __future__ import annotations

import math
import re
from typing import Any

_ANSI = re.compile(r"\x1b\[[0-9;?]{0,16}[A-Za-z]")
_NEMO = re.compile(r"^\s*\[NeMo [IWEDC] (?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) [\w.]+:\d+\]")
_DICT = re.compile(r"^\{'(?:loss|train_loss|eval_loss)': ")
_PAIR = re.compile(r"'(?P<k>\w+)': (?P<v>[^,{}]{1,64})")
NEMO_SAVE = re.compile(r"Global Checkpoint Save : Rank: (?P<rank>\d+) : Iteration: "
                       r"(?P<step>\d+) : Start time: [\d.]+s : Save duration: "
                       r"(?P<dur>[\d.]+)s")
ASYNC_DONE = re.compile(r"Async checkpoint save for step (?P<step>\d+) \((?P<path>[^)\s]+)\) "
                        r"finalized successfully")
_KEYS = {"loss": "loss", "train_loss": "loss", "grad_norm": "grad_norm",
         "learning_rate": "learning_rate", "epoch": "epoch"}


def pieces(text: str) -> tuple[list[str], list[int]]:
    """The logical lines of `text` and, for each, its physical line's number."""
    lines: list[str] = []
    physical: list[int] = []
    for number, line in enumerate(text.split("\n")):
        if "\x1b" in line:
            line = _ANSI.sub("", line)
        for piece in re.split(r"\r|\^M", line) if ("\r" in line or "^M" in line) else [line]:
            if "%|" in piece and "]{'" in piece:  # a bar, then the dict logged after it
                bar, _, rest = piece.partition("]{'")
                lines.extend([bar + "]", "{'" + rest])
                physical.extend([number, number])
            elif piece.strip():
                lines.append(piece)
                physical.append(number)
    return lines, physical


def nemo_time(line: str) -> str | None:
    """NeMo's logging prefix: the time (local, no zone) the line was written."""
    m = _NEMO.match(line) if line.lstrip().startswith("[NeMo") else None
    return m.group("ts") if m else None


def loss_dict(line: str) -> dict[str, Any] | None:
    """The numbers of a Trainer loss dict line, or None when the line is not one."""
    text = line.strip()
    if not (_DICT.match(text) and text.endswith("}")) or len(text) > 2000:
        return None
    out: dict[str, Any] = {}
    for m in _PAIR.finditer(text):
        key = _KEYS.get(m.group("k"))
        if key is None and m.group("k") not in ("step", "global_step"):
            continue
        try:
            value = float(m.group("v").strip().strip("'"))
        except ValueError:
            continue
        if m.group("k") in ("step", "global_step"):
            out["step"] = int(value)
        elif math.isnan(value) or math.isinf(value):
            out[f"{key}_is_nan"] = True
        elif key:
            out[key] = value
    return out


_RAISED = re.compile(r"(?:^|\]:?\s*|\s)(?P<exc>(?:[A-Za-z_]\w{0,63}\.){0,8}[A-Za-z_]\w{0,63}"
                     r"(?:Error|Exception)): (?P<msg>.{1,2000})$")
_NCCL_IN = re.compile(r"NCCL error in: \S+, (?P<what>[^(\n]{1,200}?)\s*(?:\(|,|$)")
_EXIT_LABELS = ("ecc", "gpu_lost", "enospc", "io_error", "illegal_memory", "segfault",
                "dataloader", "bus_error")


def raised(line: str) -> tuple[str, dict[str, Any]] | None:
    """The last line of a Python traceback that says what failed, as the event it is:
    `RuntimeError: CUDA error: uncorrectable ECC error encountered`, `OSError: [Errno 28] No
    space left on device: '/ckpt/...'`, `torch.distributed.DistBackendError: NCCL error in:
    .../ProcessGroupNCCL.cpp:1970, unhandled system error` -> (`job.worker_exited` with the
    exception and the failure the text names, which the detector's text rules classify;
    `comm.nccl_error` for NCCL's), or None: an exception that names no failure we know is
    not read as one (a `ValueError` of the job's own)."""
    from schemas.failure_text import classify

    m = _RAISED.search(line)
    if m is None:
        return None
    label = classify(m.group("msg"))
    if label == "nccl_error":
        what = _NCCL_IN.search(m.group("msg"))
        return "comm.nccl_error", {"error": what.group("what").strip() if what else m.group(
            "exc").rsplit(".", 1)[-1], "exception": m.group("exc")}
    if label not in _EXIT_LABELS:
        return None
    return "job.worker_exited", {"exception": m.group("exc"), "error": label}
