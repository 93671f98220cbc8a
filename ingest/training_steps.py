"""Training progress in the frameworks' own words (part of the training-log adapter,
`ingest/nccl.py`): what is a training step, and one `job.step` per step.

- Megatron `iteration 34/ 10000 | elapsed time per iteration (ms): 4103.1 | ... lm loss:`
  (Megatron-DeepSpeed prints `lm_loss:`); Lightning's and NeMo's `global_step=`; DeepSpeed's
  `[Rank 0] step=35, skipped=0` and its throughput timer's `epoch=0/micro_step=35/
  global_step=35, RunningAvgSamplesPerSec=...`; fairseq's `train_inner` (`epoch 001:   450 /
  1891 loss=11.521, ..., ups=0.5, ..., num_updates=445, ...` and `--log-format json`'s
  `{"epoch": 27, "update": 26.267, "loss": "8.206", ..., "num_updates": "33700"}`); a tqdm bar
  (Hugging Face Trainer: `50%|#####| 1050/2100 [00:10<00:10, 100.00it/s]`); the documented
  default `step=2200 loss=2.761 step_time=1.21s`;
- one step, one event: the same step read again (tqdm redrawing the same bar, DeepSpeed's
  step line and its timer line, a Trainer loss dict glued after the bar) adds what it says
  to the step already read (`Progress.merge`), never a second `job.step`;
- an evaluation is not training: a bar whose description says so (`Evaluating`,
  `Validation DataLoader 0`), a bar after Hugging Face's `***** Running Evaluation *****`,
  a bar counting to another total than the training bar's (the Trainer's `2/17` evaluation
  bar redrawn beside the training bar), an evaluation dict (`{'eval_loss': ...}`), fairseq's
  `valid on 'valid' subset` lines.
"""

from __future__ import annotations

import json
import re
from typing import Any

_MEGATRON = re.compile(r"iteration\s+(?P<step>\d+)/\s*\d+ \|")
_MEGATRON_MS = re.compile(r"elapsed time per iteration \(ms\): (?P<ms>[\d.]+)")
_MEGATRON_LOSS = re.compile(r"lm[ _]loss: (?P<loss>[\d.]+(?:E[+-]\d+)?)", re.I)
_GLOBAL_STEP = re.compile(r"global_step=(?P<step>[\d.]+(?:e\+?\d+)?)")
_LOSSES = [re.compile(rf"\b{name}=(?P<loss>[\d.]+)") for name in (
    "reduced_train_loss", "train_loss", "loss")]
_DEEPSPEED = re.compile(r"\[Rank \d+\] step=(?P<step>\d+), skipped=\d+")
_DS_RATE = re.compile(r"CurrSamplesPerSec=(?P<rate>[\d.]+)")
BAR = re.compile(r"(?<!\d)(?P<pct>\d{1,3}+)%\|[^|\r\n]{0,400}+\| *+"
                 r"(?P<step>\d{1,12}+)/(?P<total>\d{1,12}+) \[(?P<inner>[^\]\r\n]{0,800}+)\]")
"""A tqdm bar: `{desc}: {pct}%|{bar}| {n}/{total} [{elapsed}<{remaining}, {rate}{postfix}]`."""
_RATE = re.compile(r"(?<![\w.])(?P<rate>[\d.]+)(?P<unit>s/it|it/s)")
_EVAL_DESC = re.compile(r"(?i)\b(?:eval\w*|valid\w*|val|test\w*|predict\w*|inference)\b")
_EVAL_START = re.compile(r"\*{3,} Running (?:Evaluation|Prediction) \*{3,}")
_TRAIN_START = re.compile(r"\*{3,} Running training \*{3,}")
_FAIRSEQ = re.compile(r"(?:^|\|\s)\s*epoch (?P<epoch>\d+):\s+(?P<i>\d+) / (?P<n>\d+) "
                      r"(?P<rest>.{1,4000})$")
_FAIRSEQ_UPDATES = re.compile(r"\bnum_updates=(?P<step>\d+)")
_FAIRSEQ_KV = re.compile(r"\b(?P<k>loss|ups)=(?P<v>[\d.]+(?:e[+-]?\d+)?)")
_PROGRESS = re.compile(r"(?:^|\s)step=(?P<step>\d+)(?P<rest>(?:\s+\w+=\S+)*)")


def _num(value: str) -> float | None:
    try:
        return float(value.rstrip("s"))
    except ValueError:
        return None


class Progress:
    """What one payload said about progress: the step records read so far (to merge a
    step read twice), the training bar's total and whether an evaluation is running."""

    def __init__(self) -> None:
        self.steps: dict[int, dict[str, Any]] = {}
        self.train_total: int | None = None
        self.evaluating = False
        self.bar_step: int | None = None
        """The training bar's last step: a Trainer loss dict after it is that step's."""

    def restart(self) -> None:
        """A checkpoint was restored: the steps after it are a rerun's, not repeats."""
        self.steps.clear()

    def mark(self, line: str) -> None:
        """Hugging Face's banners: an evaluation starts, training (re)starts."""
        if "*****" in line:
            if _EVAL_START.search(line):
                self.evaluating = True
            elif _TRAIN_START.search(line):
                self.evaluating = False

    def step(self, line: str) -> dict[str, Any] | None:
        """The training step `line` reports (step, and loss and step time when it says), or
        None: not progress, or an evaluation's."""
        if (fairseq := _fairseq(line)) is not None:
            return fairseq or None
        if m := _MEGATRON.search(line):
            out: dict[str, Any] = {"step": int(m.group("step"))}
            if ms := _MEGATRON_MS.search(line):
                out["step_time_s"] = float(ms.group("ms")) / 1000
            if loss := _MEGATRON_LOSS.search(line):
                out["loss"] = float(loss.group("loss"))
            return out
        bar = BAR.search(line) if "%|" in line else None
        if bar is not None:
            return self._bar(bar, line)
        if m := _GLOBAL_STEP.search(line):
            out = {"step": int(float(m.group("step")))}
            if "RunningAvgSamplesPerSec" in line and (rate := _DS_RATE.search(line)):
                out["samples_per_s"] = float(rate.group("rate"))  # DeepSpeed's timer
            for pattern in _LOSSES:
                if found := pattern.search(line):
                    out["loss"] = float(found.group("loss"))
                    break
            return out
        if m := _DEEPSPEED.search(line):
            return {"step": int(m.group("step"))}
        if m := _PROGRESS.search(line):
            out = {"step": int(m.group("step"))}
            for pair in m.group("rest").split():
                key, _, value = pair.partition("=")
                number = _num(value)
                if key in ("loss", "step_time", "samples_per_s") and number is not None:
                    out["step_time_s" if key == "step_time" else key] = number
            return out
        return None

    def _bar(self, bar: re.Match[str], line: str) -> dict[str, Any] | None:
        total = int(bar.group("total"))
        inner = bar.group("inner")
        if _EVAL_DESC.search(line[max(0, bar.start() - 200):bar.start()]):
            return None
        if self.train_total is None:
            if self.evaluating:
                return None
            self.train_total = total
        elif total > self.train_total and not self.evaluating:
            self.train_total = total  # a longer run's bar: training restarted
        elif total != self.train_total:
            return None  # the evaluation bar tqdm draws beside the training bar
        self.evaluating = False
        if bar.group("step") == "0":
            return None  # drawn before the first step: nothing done yet
        out: dict[str, Any] = {"step": int(bar.group("step"))}
        if m := _GLOBAL_STEP.search(inner) or _FAIRSEQ_UPDATES.search(inner):
            out["step"] = int(float(m.group("step")))  # the bar counts batches of an epoch
        for pattern in _LOSSES:
            if found := pattern.search(inner):
                out["loss"] = float(found.group("loss"))
                break
        if (rate := _RATE.search(inner)) and (value := float(rate.group("rate"))):
            out["step_time_s"] = value if rate.group("unit") == "s/it" else round(1 / value, 6)
        self.bar_step = out["step"]
        return out

    def merge(self, record: dict[str, Any]) -> bool:
        """Whether `record` (a `job.step`) repeats a step already read; then what it adds
        (a loss, a step time, a better time) is put on the step read first."""
        step = record["attributes"]["step"]
        held = self.steps.get(step)
        if held is None or _apart(held, record):
            self.steps[step] = record
            return False
        attrs, new = held["attributes"], record["attributes"]
        for key, value in new.items():
            if key not in attrs:
                attrs[key] = value
        if attrs.get("time_source") not in _TIMED and new.get("time_source") in _TIMED:
            held["time"] = record["time"]
            attrs["time_source"] = new["time_source"]
            attrs.pop("time_from_line", None)
        raw = str(attrs.get("raw") or "")
        if len(raw) < 2048 and new.get("raw") and new["raw"] not in raw:
            attrs["raw"] = f"{raw}\n{new['raw']}"[:4096]
        return True


_TIMED = ("line", "line_year")
_SAME_STEP_S = 600
"""One step's lines are printed within seconds; the same step number read this far apart
(both from their lines' own times) is another run's."""


def _apart(held: dict[str, Any], record: dict[str, Any]) -> bool:
    from datetime import datetime

    if held["attributes"].get("time_source") not in _TIMED or record["attributes"].get(
            "time_source") not in _TIMED:
        return False
    try:
        gap = datetime.fromisoformat(record["time"]) - datetime.fromisoformat(held["time"])
    except (TypeError, ValueError):
        return False
    return abs(gap.total_seconds()) > _SAME_STEP_S


def _fairseq(line: str) -> dict[str, Any] | None:
    """fairseq's progress: {} for a line that is fairseq's but no training step (a
    validation, an epoch-local count without `num_updates`), None for any other line."""
    if "epoch" not in line:
        return None
    if "valid on '" in line:
        return {}
    if (at := line.find('{"epoch": ')) >= 0:
        try:
            stats = json.loads(line[at:])
        except ValueError:
            return None
        if not isinstance(stats, dict) or "num_updates" not in stats:
            return None
        if any(str(k).startswith("valid") for k in stats) or "loss" not in stats:
            return {}
        out: dict[str, Any] = {"step": int(float(stats["num_updates"]))}
        for key, value in (("loss", stats.get("loss")), ("ups", stats.get("ups"))):
            number = _num(str(value)) if value is not None else None
            if number is not None and key == "loss":
                out["loss"] = number
            elif number:
                out["step_time_s"] = round(1 / number, 6)
        return out
    m = _FAIRSEQ.search(line)
    if m is None:
        return None
    updates = _FAIRSEQ_UPDATES.search(m.group("rest"))
    if updates is None:
        return {}
    out = {"step": int(updates.group("step")), "epoch": int(m.group("epoch"))}
    for kv in _FAIRSEQ_KV.finditer(m.group("rest")):
        number = float(kv.group("v"))
        if kv.group("k") == "loss":
            out.setdefault("loss", number)
        elif number:
            out["step_time_s"] = round(1 / number, 6)
    return out


def split_bar(piece: str) -> list[str]:
    """A tqdm bar and what was printed right after it on the same line (a log line, a loss
    dict, another program's glog line): two pieces, each read on its own."""
    if "%|" not in piece:
        return [piece]
    m = BAR.search(piece)
    if m is None or not piece[m.end():].strip():
        return [piece]
    return [piece[:m.end()], piece[m.end():]]
