"""Training-process logs (from a log shipper) -> job events.

Recognised, one line at a time unless noted (docs/adapters.md has an example of each):
- NCCL watchdog timeouts, new and old wording, with or without SeqNum, truncated lines too
  -> `comm.nccl_timeout` (rank, seq_num, op_type, timeout_ms, ran_ms);
- `NCCL WARN NET/IB` completion errors and ncclSystemError/ncclInternalError/ncclRemoteError
  -> `comm.nccl_error`;
- torchrun/torchelastic `ChildFailedError` blocks (multi-line: the "Root Cause" section with
  host, rank, exitcode, time) -> `job.worker_exited` with `root_cause = true`;
- CUDA out of memory -> `job.oom`;
- checkpoint save/load lines of DeepSpeed, Megatron, NeMo, Lightning and the HF Trainer, with
  the step from the line or the path (`ingest/checkpoint_text.py`): a save the framework says
  finished -> `checkpoint.saved`, one an exception interrupted -> `checkpoint.failed`, one
  that only started -> `checkpoint.started`; a load -> `checkpoint.restored`, and
  `checkpoint.failed` (operation `restore`) when an exception follows it before any step;
- progress lines in the documented default format `step=<int> [loss=<float>]
  [step_time=<float>s] [samples_per_s=<float>]` -> `job.step`.
The shipper names the job (project, job id, attempt) and the node; a line's own ISO timestamp
(`2026-11-30T08:57:30Z`, or Python logging's `2026-11-30 08:57:30,123`) is its time; a line
with none (Megatron's checkpoint save/load, a rank's exception after its last timed line)
takes the time of the nearest timed line of the same file, before it else after it, and says
so (`time_source: previous_line`), with the interval it lies in (`time_lower`, `time_upper`:
the timed lines around it); only a file without timed lines falls back to the time it was
observed. Unrecognised lines are not events and are skipped.
"""

from __future__ import annotations

import re
from typing import Any

from ingest import checkpoint_text, slurm_output, training_exits, training_text
from ingest.base import Adapter, Context, Reject, raw_evidence
from ingest.redact import clip
from ingest.training_records import _Lines, _time
from schemas.failure_text import classify

_WATCHDOG = re.compile(
    r"(?:\[Rank (?P<rank>\d+)\] )?Watchdog caught collective operation timeout: WorkNCCL\("
    r"(?:SeqNum=(?P<seq>\d+), )?OpType=(?P<op>\w+)(?:[^)]{0,400}?Timeout\(ms\)=(?P<timeout>\d+))?"
    r"(?:[^)]{0,400}\) ran for (?P<ran>\d+) milliseconds)?")
# a pattern that starts with a repeated class starts only where that class does (the
# lookbehind) and keeps what it took (possessive): a 16 KB run of digits is read once, not
# 16k times; `.*?` between two parts is bounded. See tests/ingest/test_untrusted_input.py.
_NET_IB = re.compile(r"(?:(?<![\w.-])(?P<host>[\w.-]++):(?P<pid>\d++):(?P<tid>\d++) )?"
                     r"(?:\[(?P<dev>\d++)\] )?"
                     r"(?:(?<![\w/.-])[\w/.-]{1,120}\.c[cp]?p?:\d{1,6} )?"  # the source line
                     r"NCCL WARN NET/IB ?: ?(?P<msg>.+)")
_GLOBAL_RANK = re.compile(r"\[rank(\d{1,7})\]:")
_IB_DEVICE = re.compile(r"\b(?P<ibdev>mlx5_\d+)(?::(?P<port>\d+))?")
_MEGATRON_LOAD = re.compile(r"successfully loaded checkpoint from (?P<path>\S++).{0,400}?at "
                            r"iteration (?P<step>\d+)", re.I)
_MEGATRON_LOADING = re.compile(r"(?<!successfully )\bloading checkpoint from (?P<path>\S++) at "
                               r"iteration (?P<step>\d+)", re.I)
"""Megatron-LM's start of a load (`loading checkpoint from <dir> at iteration N`): not a
restore until `successfully loaded`; an exception before then is the load's failure."""
_NCCL_ERR = re.compile(r"(?P<err>nccl(?:System|Internal|Remote|Unhandled(?:Cuda)?)Error)|"
                       r"NCCL watchdog thread terminated with exception: (?P<what>.{1,300})")
# PyTorch <= 2.0: `Tried to allocate 20.00 MiB (GPU 0; 79.15 GiB total capacity; ...`; 2.1:
# `Tried to allocate 20.00 MiB. GPU 0 has a total capacty of 79.15 GiB` (sic); 2.2+ `capacity`
_OOM = re.compile(r"CUDA out of memory\.(?: Tried to allocate (?P<size>[\d.]+ [KMGT]iB))?"
                  r"(?:.{0,400}?(?:\(GPU |\bGPU )(?P<gpu>\d+)(?:;| has a total))?")
_KERNEL_OOM = re.compile(r"oom-kill:constraint=|[Oo]ut of memory: Kill(?:ed)? process \d|"
                         r"invoked oom-killer|oom_reaper: reaped|\boom_kill_process|"
                         r"out_of_memory\+0x")
_ROOT = re.compile(r"Root Cause \(first observed failure\)")
_KV = re.compile(r"^\s*(?P<k>time|host|rank|exitcode|error_file|traceback)\s*:\s*(?P<v>.+?)\s*$")
_AGENT_FAILED = re.compile(r"failed \(exitcode: (?P<code>-?\d+)\) local_rank: (?P<local>\d+) "
                           r"\(pid: (?P<pid>\d+)\)")
_SIGNAL_NAMES = {6: "SIGABRT", 9: "SIGKILL", 11: "SIGSEGV", 15: "SIGTERM", 7: "SIGBUS",
                 2: "SIGINT"}
_ENTRY = re.compile(r"^\s*\[(?P<n>\d+)\]:\s*$")
_SAVE = re.compile(r"(?:saving model to|Saving model checkpoint:|Saving model checkpoint to|"
                   r"Saving checkpoint to|saved checkpoint to|Saving checkpoint:)"
                   r"\s*'?(?P<path>[^'\s]+)'?", re.I)
_LOAD = re.compile(r"(?:Restoring states from the checkpoint path at|Loading checkpoint:|"
                   r"load checkpoint from local path:|"
                   r"Restoring checkpoint from|loaded checkpoint from|"
                   r"\[Torch\] Loading checkpoint from|"
                   r"Restoring model weights from RestoreConfig\(path=)\s*'?(?P<path>[^'\s]+)'?",
                   re.I)
_STEP_IN = re.compile(r"(?:global[ _]step|step|checkpoint|iter)[=_ -]?(?P<step>\d+)", re.I)


def _child_failed(lines: list[str], start: int) -> tuple[list[tuple[bool, dict[str, str]]], int]:
    """The entries of torchelastic's ChildFailedError report (every failed rank: the
    `Failures:` section and the `Root Cause` one), as (root cause?, key/values), and the index
    after the report."""
    entries: list[tuple[bool, dict[str, str]]] = []
    root = False
    current: dict[str, str] | None = None
    rules = 0
    i = start
    while i < len(lines) and i < start + 400:
        text = lines[i].strip()
        if text.startswith("====="):
            rules += 1
            if rules == 2 or (rules == 1 and entries):
                i += 1
                break
        elif text.startswith("Root Cause"):
            root = True
        elif text.startswith("Failures:"):
            root = False
        elif _ENTRY.match(lines[i]):
            current = {}
            entries.append((root, current))
        elif (kv := _KV.match(lines[i])) and current is not None:
            current[kv.group("k")] = kv.group("v")
        elif i > start and (_WATCHDOG.search(lines[i]) or _NCCL_ERR.search(lines[i])):
            break  # another record: the report ended without its closing rule
        i += 1
    return entries, i


def _exit_record(sink: _Lines, block: str, root: bool, kv: dict[str, str]) -> None:
    from ingest.timestamps import local_time

    rank = re.match(r"(\d+)", kv.get("rank", ""))
    local = re.search(r"local_rank: (\d+)", kv.get("rank", ""))
    code = re.match(r"(-?\d+)", kv.get("exitcode", ""))
    pid = re.search(r"pid: (\d+)", kv.get("exitcode", ""))
    signal = re.search(r"Signal (\d+) \((\w+)\)", kv.get("traceback", ""))
    attrs: dict[str, Any] = {"root_cause": root}
    if rank:
        attrs["rank"] = int(rank.group(1))
    if local:
        attrs["local_rank"] = int(local.group(1))
    if code:
        attrs["exit_code"] = int(code.group(1))
    if pid:
        attrs["pid"] = int(pid.group(1))
    if signal:
        attrs["signal"] = signal.group(2)
    if failure := classify(kv.get("error_file", "") + " " + kv.get("traceback", "")):
        attrs["failure"] = failure
    when = local_time(kv["time"].replace("_", " "), sink.ctx) if kv.get("time") else None
    sink.emit(block, "job.worker_exited", attrs, severity="error", scope="rank",
              entity=f"rank-{attrs['rank']}" if "rank" in attrs else None,
              node=kv.get("host"), time=when)


def _save(sink: _Lines, saves: checkpoint_text.Saves, line: str,
          said: tuple[str, int | None, str, float | None], index: int,
          async_steps: set[int]) -> None:
    """A save's line: a start is remembered (the file decides, `checkpoint_text`); a finish
    is the checkpoint. NeMo's save line of an asynchronous save says it was staged."""
    what, step, path, duration = said
    if step is None:
        sink.out.append(Reject("attributes.step", "checkpoint line without a step in the "
                               "line or the path", raw_evidence(line)))
        return
    if what == "finished" and duration is not None and step in async_steps:
        what = "started"
    if what == "started":
        checkpoint_text.started(saves, step, path, line, index, len(sink.out))
        return
    checkpoint_text.finished(saves, step, path, line, index, duration, len(sink.out))


def _decide_saves(sink: _Lines, saves: checkpoint_text.Saves) -> None:
    """The file's saves, decided now it has been read, each put where its line was."""
    placed: list[tuple[int, dict[str, Any] | Reject]] = []
    for what, save in checkpoint_text.decided(saves):
        attrs: dict[str, Any] = {"step": save.step, "path": save.path}
        if what == "saved" and save.duration_s is not None:
            attrs["duration_s"] = save.duration_s
        line, sink.index = (save.done_line, save.done_index) if what == "saved" else (
            save.line, save.index)
        sink.fallback = None
        sink.emit(line, f"checkpoint.{what}", attrs,
                  **({"scope": "path", "entity": save.path} if save.path else {}))
        placed.append((save.done_at if what == "saved" else save.at, sink.out.pop()))
    for at, record in sorted(placed, key=lambda p: p[0], reverse=True):
        sink.out.insert(at, record)


def _interrupted(sink: _Lines, saves: checkpoint_text.Saves, line: str, exc: str) -> None:
    """An exception while a save or a load was under way: that checkpoint failed."""
    for save, operation in checkpoint_text.interrupted(saves, line):
        sink.emit(line, "checkpoint.failed", {"step": save.step, "path": save.path or None,
                                              "operation": operation,
                                              "reason": clip(exc, 300)}, severity="error")
    if saves.loading is not None and checkpoint_text.load_error(exc, saves.loading[1]):
        step, path = saves.loading
        saves.loading = None
        sink.emit(line, "checkpoint.failed", {"step": step, "path": path,
                                              "operation": "restore",
                                              "reason": clip(exc, 300)}, severity="error")


def parse(text: str, ctx: Context) -> list[dict[str, Any] | Reject]:
    if not (ctx.project and ctx.job_id):
        return [Reject("job_id", "training logs need the shipper to name project and job "
                       "(--project/--job, or X-Jobtrail-Project/-Job headers)",
                       raw_evidence(clip(text, 1000)))]
    lines, physical = training_text.pieces(text)
    sink = _Lines(ctx)
    saves = checkpoint_text.Saves()
    async_steps = checkpoint_text.nemo_async(text)
    stepless: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        sink.index = i
        i += 1
        if i > 1 and physical[i - 1] == physical[i - 2]:
            own, source = _time(lines[i - 2], ctx)  # glued by \r to the piece before
            if source != "observed":
                sink.fallback = (own, source)  # else the one before that keeps its place
        else:
            sink.fallback = None
        sink.progress.mark(line)
        if (saves.saves or saves.loading) and (error := training_text.exception(line)):
            _interrupted(sink, saves, line, error)
        if "ChildFailedError" in line or _ROOT.search(line) or line.strip() == "Failures:":
            entries, end = _child_failed(lines, i - 1)
            if entries:
                block = "\n".join(lines[i - 1:end])
                for root, kv in entries:
                    _exit_record(sink, block, root, kv)
                i = end
                continue
        if (said := slurm_output.read(line)) is not None:
            if not slurm_output.merged(sink.slurm, said, line):
                rank = said.attributes.get("rank")
                sink.emit(line, said.type, said.attributes, severity=said.severity,
                          node=said.node or None, scope="rank" if rank is not None else None,
                          entity=f"rank-{rank}" if rank is not None else None)
                if said.key:
                    sink.slurm[said.key] = sink.out[-1]  # type: ignore[assignment]
        elif match := _AGENT_FAILED.search(line):
            code = int(match.group("code"))
            attrs = {"local_rank": int(match.group("local")), "exit_code": code,
                     "pid": int(match.group("pid")), "reported_by": "torchelastic agent"}
            if code < 0:
                attrs["signal"] = _SIGNAL_NAMES.get(-code, f"signal {-code}")
            sink.emit(line, "job.worker_exited", attrs, severity="error")
        elif (failed := training_exits.read(line)) is not None:
            sink.emit(line, failed.type, failed.attributes, severity="error",
                      node=failed.node or None)
        elif match := _WATCHDOG.search(line):
            attrs = {"op_type": match.group("op")}
            for key, group in (("rank", "rank"), ("seq_num", "seq"), ("timeout_ms", "timeout"),
                               ("ran_ms", "ran")):
                if match.group(group):
                    attrs[key] = int(match.group(group))
            # torch's `[rank13]:` prefix is the global rank; `[Rank 1]` is the process group's
            if (prefix := _GLOBAL_RANK.search(line, 0, match.start())) and \
                    int(prefix.group(1)) != attrs.get("rank"):
                attrs["pg_rank"], attrs["rank"] = attrs.get("rank"), int(prefix.group(1))
            sink.emit(line, "comm.nccl_timeout", attrs, severity="error", scope="rank",
                      entity=f"rank-{attrs['rank']}" if "rank" in attrs else None)
        elif match := _NET_IB.search(line):
            attrs = {"error": "NET/IB", "detail": match.group("msg"),
                     "device": match.group("dev") or ""}
            if match.group("pid"):
                attrs["pid"] = int(match.group("pid"))
            if ib := _IB_DEVICE.search(match.group("msg")):
                attrs["ib_device"] = ib.group("ibdev")
            sink.emit(line, "comm.nccl_error", attrs, severity="error",
                      node=match.group("host"))
        elif match := _NCCL_ERR.search(line):
            sink.emit(line, "comm.nccl_error", {"error": match.group("err") or "watchdog exception",
                                                "detail": match.group("what")}, severity="error")
        elif (exc := training_text.raised(line)) is not None:
            rank = _GLOBAL_RANK.search(line)
            attrs = {**exc[1], **({"rank": int(rank.group(1))} if rank else {})}
            sink.emit(line, exc[0], attrs, severity="error")
        elif classify(line) == "oom" and not _KERNEL_OOM.search(line):
            # (the kernel's OOM killer is the node's log: node-log reads it, pid and task)
            attrs = {"kind": "cuda" if "CUDA" in line or "cuda" in line else "host"}
            if (match := _OOM.search(line)) and match.group("size"):
                attrs["requested"] = match.group("size")
            if match and match.group("gpu"):
                attrs["gpu"] = match.group("gpu")
            sink.emit(line, "job.oom", attrs, severity="error")
        elif (saving := checkpoint_text.save_line(line)) is not None:
            _save(sink, saves, line, saving, i - 1, async_steps)
        elif loading := _MEGATRON_LOADING.search(line):
            checkpoint_text.loaded(saves, int(loading.group("step")),
                                   loading.group("path").rstrip(".,"))
        elif (match := _MEGATRON_LOAD.search(line)) or (match := _LOAD.search(line)):
            megatron = match.re is _MEGATRON_LOAD
            path = match.group("path").rstrip(".,")
            found = int(match.group("step")) if megatron else None
            if found is None and (step := _STEP_IN.search(line[:match.start()])
                                  or _STEP_IN.search(path)):
                found = int(step.group("step"))
            if found is None:
                sink.out.append(Reject("attributes.step", "checkpoint line without a step "
                                       "in the line or the path", raw_evidence(line)))
                continue
            sink.emit(line, "checkpoint.restored", {"step": found, "path": path},
                      scope="path", entity=path)
            checkpoint_text.loaded(saves, found, path)
        elif (numbers := training_text.loss_dict(line)) is not None:
            at = numbers.pop("step", None)
            at = sink.progress.bar_step if at is None else at
            if numbers.pop("evaluation", False):
                continue  # an evaluation's metrics, not a training step's
            if at is None:
                stepless.append(line)
                continue
            sink.emit(line, "job.step", {"step": at, **numbers})
            saves.loading = None
        elif progress := sink.progress.step(line):
            sink.emit(line, "job.step", progress)
            saves.loading = None
    _decide_saves(sink, saves)
    sink.place(lines)
    if stepless:
        sink.out.append(Reject("attributes.step", f"{len(stepless)} Trainer loss dict(s) "
                               "without a step: ship the progress bar with them (or log "
                               "global_step) to read them as progress",
                               raw_evidence("\n".join(stepless[:20]))))
    return sink.out


ADAPTER = Adapter("training-log", parse, doc="NCCL, torchrun, CUDA OOM, checkpoint and step "
                  "lines from training logs", line_oriented=True)
