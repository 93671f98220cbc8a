"""How many GPUs a Slurm job holds, from whatever part of its record says it, and which part.

Slurm states a job's GPUs in many places, and which ones are filled depends on the tool and
the release (21.08 to 24.x):

- allocated: `tres.allocated` (sacct --json: `{"type": "gres", "name": "gpu", "count": 16}`),
  `tres_alloc_str` (squeue --json: `cpu=2,mem=4G,node=1,billing=2,gres/gpu=1,
  gres/gpu:l40s=1`), `gres_detail` (one entry per node: `gpu:a100:2(IDX:0-1)`), scontrol's
  `TRES=`/`AllocTRES=` and its `-d` node lines' `GRES=`, sacct's `AllocTRES` column;
- requested: `tres.requested`, `tres_req_str`, `tres_per_job` (`gres/gpu:16`), `tres_per_node`
  (`gres:gpu:8` in 22.05, `gres/gpu:a100:2` from 23.02, `gres/gpu=1` as slurmrestd takes it)
  times the nodes, `tres_per_task` times the tasks, the submit line (`--gres=gpu:8`,
  `--gpus=16`, `-G 16`, `--gpus-per-node=8`, `--gpus-per-task=1`), scontrol's
  `ReqTRES=`/`TresPerNode=`/`TresPerJob=`, squeue's `%b` column.

An allocation says what the job holds, a request what it asked for: the allocation wins. A
count is given with where it came from (`allocation:tres_alloc_str`, `request:tres_per_node
gres/gpu:8 x 2 nodes`): the attempt keeps the source, and a better one revises it
(`processors/gpus.py` has the precedence). A typed and an untyped count of the same GPUs
(`gres/gpu=1,gres/gpu:l40s=1`) are one GPU, not two.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Mapping
from typing import Any

GpuCount = tuple[int, str]
"""(GPUs of the whole attempt, the source: `<kind>:<what said it>`, kind allocation or
request)."""

_TRES_GPU = re.compile(r"(?:^|,)\s*gres[/:]gpu(?P<type>:[\w.-]+)?[=:](?P<n>\d+)\s*(?=,|$)")


def _int(value: Any) -> int | None:
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return int(value) if isinstance(value, int | float) and value >= 0 else None


def from_tres(text: str) -> int | None:
    """GPUs in a TRES string (`cpu=8,gres/gpu=16,node=2`; also `gres/gpu:16`): the untyped
    count, else the sum of the typed ones; None when it names no GPU."""
    if not isinstance(text, str) or "gpu" not in text:
        return None
    untyped, typed = None, 0
    found = False
    for m in _TRES_GPU.finditer(text):
        found = True
        if m.group("type"):
            typed += int(m.group("n"))
        else:
            untyped = (untyped or 0) + int(m.group("n"))
    if not found:
        return None
    return untyped if untyped is not None else typed


def from_gres(text: str) -> int | None:
    """GPUs in one GRES list (`gpu:a100:8(IDX:0-7)`, `gres:gpu:2`, `gres/gpu:3g.20gb:1`,
    `gpu`, comma-separated with other GRES): `gpu` without a count is one."""
    if not isinstance(text, str) or "gpu" not in text:
        return None
    total, found = 0, False
    for item in _split_gres(text):
        parts = item.split("(", 1)[0].strip().removeprefix("gres/").removeprefix(
            "gres:").split(":")
        if parts[0] != "gpu":
            continue
        found = True
        total += int(parts[-1]) if len(parts) > 1 and parts[-1].isdigit() else 1
    return total if found else None


def _split_gres(text: str) -> list[str]:
    """Comma-separated items, not splitting inside `(...)` (`gpu:2(IDX:0,2)`)."""
    out, depth, current = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        if ch == "," and depth == 0:
            out.append(current)
            current = ""
        else:
            current += ch
    out.append(current)
    return [o for o in out if o.strip()]


def _tres_list(entries: Any) -> int | None:
    """sacct --json's `tres.allocated`/`requested`: the `gpu` gres entry, else the typed ones."""
    if not isinstance(entries, list):
        return None
    untyped, typed, found = None, 0, False
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("type") != "gres":
            continue
        name = str(entry.get("name") or "")
        count = _int(entry.get("count"))
        if count is None or not (name == "gpu" or name.startswith("gpu:")):
            continue
        found = True
        if name == "gpu":
            untyped = (untyped or 0) + count
        else:
            typed += count
    if not found:
        return None
    return untyped if untyped is not None else typed


def nodes_of(job: Mapping[str, Any]) -> int | None:
    """How many nodes the job has (or asked for)."""
    from ingest.hostlist import HostlistError, count

    for key in ("node_count", "allocation_nodes", "num_nodes"):
        found = _int(job.get(key))
        if found:
            return found
    nodes = job.get("nodes")
    if isinstance(nodes, str) and nodes and nodes not in ("None assigned", "(null)"):
        try:  # counted, never spelled out: the record's own reader judges the list
            return count(nodes) or None
        except HostlistError:
            return None
    return None


def _times(count: int | None, factor: int | None, what: str, unit: str) -> GpuCount | None:
    if count is None or factor is None:
        return None
    return count * factor, f"request:{what} x {factor} {unit}{'s' if factor != 1 else ''}"


def from_submit_line(line: str, nodes: int | None = None, tasks: int | None = None
                     ) -> GpuCount | None:
    """GPUs a submit line (`sbatch -N 2 --gres=gpu:8 train.sh`, `#SBATCH` lines) asks for:
    `--gpus`/`-G` for the job, `--gres=gpu:N` and `--gpus-per-node` times the nodes
    (`-N`/`--nodes` on the line, else `nodes`), `--gpus-per-task` times the tasks."""
    if not isinstance(line, str) or ("gpu" not in line and "-G" not in line):
        return None
    try:
        words = shlex.split(line.replace("#SBATCH", " "), comments=False)
    except ValueError:
        words = line.replace("#SBATCH", " ").split()
    opts: dict[str, str] = {}
    i = 0
    while i < len(words):
        word = words[i]
        name, eq, value = word.partition("=")
        if name in ("--gres", "--gpus", "--gpus-per-node", "--gpus-per-task", "--nodes",
                    "--ntasks", "-G", "-N", "-n") and not eq and i + 1 < len(words):
            value, i = words[i + 1], i + 1
        elif name.startswith("-G") and len(name) > 2 and not eq:
            name, value = "-G", name[2:]
        elif name.startswith("-N") and len(name) > 2 and not eq:
            name, value = "-N", name[2:]
        if name in ("--gres", "--gpus", "--gpus-per-node", "--gpus-per-task", "--nodes",
                    "--ntasks", "-G", "-N", "-n"):
            opts.setdefault({"-G": "--gpus", "-N": "--nodes", "-n": "--ntasks"}.get(name, name),
                            value)
        i += 1
    on_line = _int(opts.get("--nodes", "").split("-")[0]) if "--nodes" in opts else None
    nodes = on_line or nodes
    tasks = _int(opts.get("--ntasks", "")) or tasks

    def count(value: str) -> int | None:  # `16`, `a100:16`
        last = value.rsplit(":", 1)[-1]
        return int(last) if last.isdigit() else None

    if "--gpus" in opts and (n := count(opts["--gpus"])) is not None:
        return n, f"request:--gpus={opts['--gpus']}"
    if "--gres" in opts and (n := from_gres(opts["--gres"])) is not None:
        return _times(n, nodes or 1, f"--gres={opts['--gres']}", "node")
    if "--gpus-per-node" in opts and (n := count(opts["--gpus-per-node"])) is not None:
        return _times(n, nodes or 1, f"--gpus-per-node={opts['--gpus-per-node']}", "node")
    if "--gpus-per-task" in opts and (n := count(opts["--gpus-per-task"])) is not None \
            and tasks:
        return _times(n, tasks, f"--gpus-per-task={opts['--gpus-per-task']}", "task")
    return None


def _allocated(job: Mapping[str, Any]) -> GpuCount | None:
    tres = job.get("tres")
    if isinstance(tres, dict) and (n := _tres_list(tres.get("allocated"))) is not None:
        return n, "allocation:tres.allocated"
    for key in ("tres_alloc_str", "AllocTRES", "TRES"):
        if (n := from_tres(str(job.get(key) or ""))) is not None:
            return n, f"allocation:{key} {_said(job.get(key))}"
    detail = job.get("gres_detail")
    if isinstance(detail, list) and detail:
        counts = [from_gres(str(d)) for d in detail]
        if any(c is not None for c in counts):
            many = "s" if len(detail) != 1 else ""
            return sum(c or 0 for c in counts), \
                f"allocation:gres_detail ({len(detail)} node{many})"
    return None


def _requested(job: Mapping[str, Any]) -> GpuCount | None:
    tres = job.get("tres")
    if isinstance(tres, dict) and (n := _tres_list(tres.get("requested"))) is not None:
        return n, "request:tres.requested"
    for key in ("tres_req_str", "ReqTRES"):
        if (n := from_tres(str(job.get(key) or ""))) is not None:
            return n, f"request:{key} {_said(job.get(key))}"
    nodes, tasks = nodes_of(job), _int(job.get("tasks") or job.get("num_tasks"))
    readers: list[tuple[str, Callable[[str], int | None], int | None, str]] = [
        ("tres_per_job", _per, 1, ""), ("TresPerJob", _per, 1, ""),
        ("tres_per_node", _per, nodes, "node"), ("TresPerNode", _per, nodes, "node"),
        ("tres_per_task", _per, tasks, "task"), ("TresPerTask", _per, tasks, "task"),
        ("gres", from_gres, nodes, "node"), ("Gres", from_gres, nodes, "node")]
    for key, read, factor, unit in readers:
        value = job.get(key)
        if not isinstance(value, str) or (n := read(value)) is None:
            continue
        if not unit:
            return n, f"request:{key} {_said(value)}"
        if factor:
            return _times(n, factor, f"{key} {_said(value)}", unit)
    line = job.get("submit_line") or job.get("SubmitLine")
    if isinstance(line, str) and (found := from_submit_line(line, nodes, tasks)):
        return found
    return None


def _per(text: str) -> int | None:
    """`gres:gpu:8`, `gres/gpu:a100:2`, `gres/gpu=1` (per node, job or task)."""
    return from_tres(text) if "=" in text else from_gres(text)


def _said(value: Any) -> str:
    """The part of a TRES or GRES string that named the GPUs (what the source said)."""
    text = str(value or "")
    parts = [p for p in _split_gres(text) if "gpu" in p]
    return ",".join(parts)[:80]


def gpus_from_job(job: Mapping[str, Any]) -> GpuCount | None:
    """(GPUs of the attempt, where it came from) from a Slurm job record: squeue/sacct
    `--json` (21.08-24.x), or the same shape rewritten from scontrol and sacct text; the
    allocation when the record has one, else the request. None when nothing says (a CPU
    job, or a record without its TRES): the count is then unknown, never 0."""
    if not isinstance(job, Mapping):
        return None
    return _allocated(job) or _requested(job)
