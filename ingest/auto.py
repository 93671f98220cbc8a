"""`--format auto`: what people actually have is a mixed dump (journalctl, dmesg, a job's
output, a JSON document pasted in). A JSON or YAML document goes to the adapter whose shape
it has; text is read by every line adapter, and each line belongs to the first adapter (in
`LINE_ORDER`) that made a record from it, so an Xid line read by both `xid` and `node-log`
is one event. Every record says which adapter read it (`attributes.adapter`); the lines
nobody claimed are counted and shown (`Report`).
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any

from ingest.base import Adapter, Context, Reject, cap_lines, raw_evidence
from ingest.canonical import ParseError

LINE_ORDER = ("xid", "training-log", "slurmctld", "node-log", "dcgm-exporter", "ipmi")
"""Specific before general: node-log also reads Xid lines; training-log only runs when the
job is known (--project/--job); dcgm-exporter's samples pasted alone, without a scrape's
`# HELP` lines, are lines too; ipmi reads a BMC's event log (`ipmitool sel list`)."""


def _shape(doc: Any) -> str | None:
    """The adapter a JSON document belongs to, by its shape."""
    items = doc if isinstance(doc, list) else [doc]
    first = next((x for x in items if isinstance(x, dict)), None)
    if first is None:
        return None
    if ("checkName" in first and "isHealthy" in first) or "healthEvent" in first:
        return "node-log"  # NVSentinel health events
    if "specversion" in first:
        return "cloudevents"
    if "LogEntry" in str(first.get("@odata.type") or "") or (
            isinstance(first.get("Members"), list) and "LogEntry" in json.dumps(
                first["Members"][:1])) or (isinstance(first.get("Events"), list)
                                           and "MessageId" in json.dumps(first["Events"][:1])):
        return "ipmi"  # a BMC's Redfish log entries or events
    if ("alerts" in first and ("orgId" in first or ("title" in first and "state" in first))) \
            or "ruleName" in first or "evalMatches" in first:
        return "grafana"
    if "alerts" in first and ("receiver" in first or "groupKey" in first):
        return "alertmanager"
    if "jobs" in first and isinstance(first.get("jobs"), list):
        return "slurm"
    if isinstance(first.get("sinfo"), list):
        return "sinfo"
    kind = str(first.get("kind") or "")
    if "EventReason" in first and "EventObject" in first:
        return "kubernetes"  # kube-eventer's webhook body
    if first.get("apiVersion") or kind.endswith("List") or kind == "Event" or "involvedObject" \
            in first or "regarding" in first:
        return "kubernetes"
    return None


_TOOL_HEADERS = (
    ("sacct", ({"JobID", "State"}, {"State", "ExitCode"})),
    ("squeue", ({"JOBID", "ST"}, {"JOBID", "STATE"})),
    ("sinfo", ({"NODELIST", "STATE"}, {"REASON", "NODELIST"})),
)


def _text_tool(text: str) -> str | None:
    """The Slurm text tool a paste came from: the command at its top (`$ squeue --me`), or
    the tool's header in its first lines."""
    from ingest.slurm_paste import command_of, unwrap

    lines = [line for line in unwrap(text[:20000])[:60] if line.strip()]
    for line in lines[:4]:
        first = line.split()[:4]
        for tool, _ in _TOOL_HEADERS:
            if tool in first:
                return tool
    for line in lines:  # the command further down (`... queried with command: squeue -o`)
        if (ran := command_of(line)) in ("sacct", "squeue", "sinfo"):
            return ran
    for line in lines:
        words = {w.split("%")[0] for w in line.replace("|", " ").split()}
        for tool, headers in _TOOL_HEADERS:
            if any(h <= words for h in headers):
                return tool
    return None


_SEGMENT_TOOLS = {"sacct", "squeue", "sinfo", "scontrol"}


def _tool_segments(text: str) -> list[tuple[str, str]] | None:
    """A paste of several Slurm tools (`squeue`, then `sinfo`), cut where each command
    starts, so each table goes to its own reader; None for one tool's output."""
    from ingest.slurm_paste import command_of

    if sum(text.count(tool) for tool in _SEGMENT_TOOLS) < 2:
        return None
    lines = text.splitlines(keepends=True)
    starts: list[tuple[int, str]] = []
    for number, line in enumerate(lines[:5000]):
        if (tool := command_of(line)) in _SEGMENT_TOOLS:
            starts.append((number, tool))
    if len({tool for _, tool in starts}) < 2:
        return None
    cuts = [0, *[n for n, _ in starts[1:]], len(lines)]
    return [(tool, "".join(lines[a:b])) for (_, tool), a, b in
            zip(starts, cuts, cuts[1:], strict=False)]


def _kubectl(text: str) -> bool:
    """kubectl's human output (get tables, describe), or a YAML object / status fragment."""
    from ingest import kubectl_describe, kubectl_states, kubectl_text, kubeflow_logs
    from ingest.kubernetes import _DESCRIBE

    head = text[:20000]
    if kubeflow_logs.recognise(head):
        return True
    if _DESCRIBE.search(head) or kubectl_states.has_states(head) or kubectl_text.is_table(head) \
            or kubectl_describe.is_node(head):
        return _text_tool(text) is None
    if re.search(r"(?m)^[^\S\n]*(?:apiVersion|kind|phase|conditions|status):", head) is None:
        return False
    import yaml

    from ingest.kubernetes import YAML_LIMITS
    from schemas.documents import load_yaml_all

    try:
        doc = next(iter(load_yaml_all(head, YAML_LIMITS)), None)
    except (yaml.YAMLError, ValueError):
        return False  # not YAML (or an alias, a bomb): not for this adapter
    return isinstance(doc, dict) and bool(
        doc.get("apiVersion") or doc.get("kind") or "phase" in doc or "conditions" in doc
        or "status" in doc)


_SCONTROL = re.compile(r"(?m)^(?:\S*[#$] )?(?:scontrol show (?:node|job)\b|[^\S\n]*NodeName="
                       r"[\w.-]+ Arch=|[^\S\n]*JobId=\d+ JobName=|UserId=\S+ GroupId=\S+ "
                       r"MCS_label=)")
"""`scontrol show node|job` output: the command, or a record's first line."""
_IBSTAT = re.compile(r"(?m)^CA '[\w-]+'[^\S\n]*\n(?:.*\n){0,12}?[^\S\n]+Port \d+:[^\S\n]*$|"
                     r"^[^\S\n]*mlx\w+[^\S\n]+port[^\S\n]+\d+[^\S\n]+==>[^\S\n]+\S+[^\S\n]+"
                     r"\((?:Up|Down)\)|"
                     r"^hca_id:[^\S\n]*\S+[^\S\n]*\n(?:.*\n){0,16}?[^\S\n]+port:[^\S\n]+\d+"
                     r"[^\S\n]*$")
"""`ibstat` (a CA, then a port block within a dozen lines), `ibv_devinfo` or `ibdev2netdev`
output: its `State: Down` lines look like kubectl's describe, so this is tried first."""


def _lines_of(record: dict[str, Any] | Reject) -> set[str]:
    if isinstance(record, Reject):
        text = record.payload
    else:
        text = str((record.get("attributes") or {}).get("raw") or record.get("message") or "")
    return {line.strip() for line in text.splitlines() if line.strip()}


def parse(text: str, ctx: Context, adapters: dict[str, Adapter]) -> list[dict[str, Any] | Reject]:
    stripped = text.lstrip()
    if stripped[:1] in ("{", "["):
        try:
            doc = json.loads(stripped)
        except ValueError:
            doc = None
        name = _shape(doc) if doc is not None else None
        if name is not None:
            return _tagged(adapters[name].parse(text, ctx), name)
    if stripped[:1] not in ("{", "[") and _IBSTAT.search(text[:20000]):
        return _tagged(adapters["ibstat"].parse(text, ctx), "ibstat")
    from ingest import kubeflow_logs

    if (stripped[:1] not in ("{", "[") and _kubectl(text)) or kubeflow_logs.recognise(text):
        try:
            return _tagged(adapters["kubernetes"].parse(text, ctx), "kubernetes")
        except ParseError:
            pass
    # past here the input is lines: no pattern reads more of one than the cap
    cap = min(adapters[name].max_line for name in LINE_ORDER)
    text, cut = cap_lines(text, cap, "auto", ctx.origin)
    if (parts := _tool_segments(text)) is not None:
        read: list[dict[str, Any] | Reject] = []
        for name, part in parts:
            try:
                read.extend(_tagged(adapters[name].parse(part, ctx), name))
            except ParseError:
                continue  # a table with no state in it (`sinfo -o "%P %a %F"`): nothing
        return [*read, *cut]
    if _SCONTROL.search(text[:20000]):
        try:
            return [*_tagged(adapters["scontrol"].parse(text, ctx), "scontrol"), *cut]
        except ParseError:
            pass
    if (tool := _text_tool(text)) is not None:
        try:
            return [*_tagged(adapters[tool].parse(text, ctx), tool), *cut]
        except ParseError:
            pass  # not that tool's table after all: read it line by line
    out: list[dict[str, Any] | Reject] = []
    rejects: list[tuple[set[str], Reject]] = []
    claimed: set[str] = set()
    for name in LINE_ORDER:
        if name == "training-log" and not (ctx.project and ctx.job_id):
            continue
        records = adapters[name].parse(text, ctx)
        mine: set[str] = set()
        for record in records:
            lines = _lines_of(record)
            if isinstance(record, Reject):
                # a line that only mentions an Xid (a drain reason, say) is another log's
                incidental = name == "xid" and "NVRM" not in record.payload
                if not incidental and not (record.field == "job_id" and name == "training-log"):
                    rejects.append((lines, Reject(record.field, f"{name}: {record.reason}",
                                                  record.payload, record.ref)))
                continue
            if lines and lines <= claimed:
                continue  # a line a more specific adapter already read
            mine |= lines
            record.setdefault("attributes", {})["adapter"] = name
            out.append(record)
        claimed |= mine
    # a line one adapter could not read but another did is not a dead letter
    for lines, reject in rejects:
        if lines and lines <= claimed:
            continue
        claimed |= lines  # the same unreadable line is one dead letter, the first adapter's
        out.append(reject)
    out.extend(_needs_job(text, ctx, adapters["training-log"], claimed))
    out.extend(cut)
    checks = [check for name in LINE_ORDER if (check := adapters[name].healthy) is not None]
    if not out and any(check(text) for check in checks):
        return []  # lines an adapter knows: nothing wrong in them
    if not out and text.strip():
        return [Reject("format", "no adapter recognised any line of this input (name one with "
                       "--format)", raw_evidence(text[:1000]))]
    return out


def _needs_job(text: str, ctx: Context, training: Adapter,
               claimed: set[str]) -> list[Reject]:
    """A job's output pasted without naming the job: its lines (NCCL, torchrun, CUDA, srun
    and slurmstepd) would be events of that job, so say which field is missing instead of
    skipping them."""
    if ctx.project and ctx.job_id:
        return []
    probe = training.parse(text, replace(ctx, project=ctx.project or "?", job_id="?"))
    lines = sorted({line for r in probe if isinstance(r, dict)
                    for line in _lines_of(r) - claimed})
    if not lines:
        return []
    return [Reject("job_id", f"training-log: {len(lines)} line(s) are a training job's output "
                   "(NCCL, torchrun, CUDA, srun/slurmstepd); name the job with --project/--job "
                   "(or the X-Jobtrail-Project/-Job headers) to read them",
                   raw_evidence("\n".join(lines)[:1000]))]


def _tagged(records: list[dict[str, Any] | Reject], name: str) -> list[dict[str, Any] | Reject]:
    for record in records:
        if isinstance(record, dict) and name:
            record.setdefault("attributes", {})["adapter"] = name
    return records
