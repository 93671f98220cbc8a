"""Source adapters: what clusters already emit -> canonical events, or dead letters.

Each adapter module (`ingest/alertmanager.py`, `ingest/xid.py`, `ingest/nccl.py`, ...) has one
entry point `parse(raw, ctx) -> list[Record]`, where a record is a canonical event *draft* (a
dict) or a `Reject(field, reason, payload)` for the part it did not understand. This module
turns drafts into validated, redacted events through the same `to_event` as canonical input,
so an adapter cannot store a secret or a malformed event, and a partially understood payload
keeps what it understood and dead-letters the rest, each reject naming the adapter and field.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from ingest.canonical import Decoded, ParseError, _dead, loads, to_event
from ingest.redact import redact_text

RAW_LIMIT = 4096
log = logging.getLogger("jobtrail.adapters")


@dataclass(frozen=True)
class Context:
    """What the shipper knows and the payload may not say (job, node, cluster)."""

    producer: str
    observed_at: datetime
    cluster: str = "default"
    project: str = ""
    job_id: str = ""
    attempt: int | None = None
    node: str = ""
    origin: str = "input"
    boot_time: datetime | None = None
    """When the machine booted: places seconds-since-boot prefixes (raw dmesg, /dev/kmsg)."""
    tz: str = "UTC"
    """The zone of local times in lines (dmesg -T, syslog, glog)."""
    year: int | None = None
    """The year of lines that do not say it (syslog, glog); default: inferred."""
    kind: str = ""
    """What a Kubernetes fragment without `kind` is (`PyTorchJob`, `Job`, ...)."""


@dataclass(frozen=True)
class Reject:
    field: str
    reason: str
    payload: str
    ref: str = ""


@dataclass
class Adapter:
    name: str
    parse: Callable[[str, Context], list[dict[str, Any] | Reject]]
    doc: str = ""
    line_oriented: bool = False
    formats: list[str] = field(default_factory=list)


def raw_evidence(payload: Any) -> str:
    """The original payload as evidence: redacted, truncated."""
    text = payload if isinstance(payload, str) else json.dumps(payload, sort_keys=True,
                                                               default=str)
    return redact_text(text)[:RAW_LIMIT]


def line_time(line: str, ctx: Context) -> tuple[str, str, str]:
    """(time, host, time_source) from a log line's prefix (`ingest.timestamps.read`: ISO,
    dmesg -T / -x / raw, kmsg, syslog, RFC 5424, glog, epoch). Without a time in the line it
    is when the shipper observed it and `time_source` says `observed`."""
    from ingest.timestamps import read

    stamp = read(line, ctx)
    return stamp.time, stamp.host, stamp.source


_FIELD = re.compile(r"\{(\w+)\}")


def fill(template: Any, values: dict[str, str], where: str) -> Any:
    """Fill `{name}` placeholders of a mapping entry from `values` (labels, data fields).

    A missing name raises ParseError naming it; a bare `"{x}"` keeps a number numeric.
    """
    if isinstance(template, dict):
        return {k: fill(v, values, f"{where}.{k}") for k, v in template.items()}
    if not isinstance(template, str):
        return template
    missing = [name for name in _FIELD.findall(template) if name not in values]
    if missing:
        raise ParseError(missing[0], f"needed by the mapping for {where}")
    value = _FIELD.sub(lambda m: values[m.group(1)], template)
    if _FIELD.fullmatch(template) and re.fullmatch(r"-?\d+(\.\d+)?", value):
        return json.loads(value)
    return value


def json_object(text: str, what: str = "the body") -> dict[str, Any]:
    """A payload that must be one JSON object; a ParseError saying which rule it broke."""
    try:
        payload = loads(text)
    except RecursionError:
        raise ParseError("", "not JSON we accept: nested too deep to parse") from None
    except ValueError as exc:
        raise ParseError("", f"not JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise ParseError("", f"{what} must be a JSON object")
    return payload


@dataclass
class Report:
    """What an adapter did with its input: lines read, and the ones no record used (with a
    few examples), and how many events carry no time from their line."""

    adapter: str
    lines: int = 0
    skipped: int = 0
    examples: list[str] = field(default_factory=list)
    untimed: int = 0
    by_adapter: dict[str, int] = field(default_factory=dict)
    """Events per adapter (`auto` routes lines to several)."""
    lines_by_adapter: dict[str, int] = field(default_factory=dict)
    """Input lines each adapter took (`auto`)."""

    def summary(self) -> str:
        if not self.lines:
            if self.adapter == "auto" and self.by_adapter:
                return f"auto: read as {', '.join(sorted(self.by_adapter))}"
            return ""
        out = (f"{self.adapter}: read {self.lines} line(s), {self.lines - self.skipped} used, "
               f"{self.skipped} skipped (nothing this adapter reads)")
        if self.adapter == "auto":
            taken = ", ".join(f"{k} {v}" for k, v in sorted(self.by_adapter.items()))
            out += f"; events by adapter: {taken or 'none'}"
            lines = ", ".join(f"{k} {v}" for k, v in sorted(self.lines_by_adapter.items()))
            out += f"; lines taken by adapter: {lines or 'none'}"
            if self.skipped:
                out += f"; {self.skipped} line(s) no adapter claimed, e.g. " + " | ".join(
                    repr(x[:80]) for x in self.examples)
        if self.untimed:
            out += (f"; {self.untimed} event(s) had no time in their line and carry the time "
                    "they were read (attributes.time_source=observed: give --boot-time, --tz "
                    "or --year if the lines have one jobtrail could not place)")
        return out


_JSON_DOCUMENT = re.compile(r"\s*(?:\{\s*\"|\[\s*[{\]])")


def report(adapter: Adapter, text: str, decoded: list[Decoded]) -> Report:
    """Which non-blank lines some record came from (its raw evidence or message holds the
    line), for a line-oriented adapter; events stamped with the time they were read."""
    from schemas.events import Event

    out = Report(adapter.name)
    seen: set[str] = set()
    owner: dict[str, str] = {}
    for d in decoded:
        by = adapter.name
        if isinstance(d, Event):
            if d.attributes.get("time_source") == "observed":
                out.untimed += 1
            by = str(d.attributes.get("adapter") or adapter.name)
            out.by_adapter[by] = out.by_adapter.get(by, 0) + 1
            pieces = [str(d.attributes.get("raw") or ""), d.message or ""]
        else:
            pieces = [str(getattr(d, "payload", "") or "")]
        for piece in pieces:
            for p in piece.splitlines():
                if p.strip():
                    seen.add(p.strip())
                    owner.setdefault(p.strip(), by)
    if not adapter.line_oriented or _JSON_DOCUMENT.match(text):
        return out  # a document, not lines (sinfo --json; what auto routed by shape)
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        out.lines += 1
        redacted = redact_text(stripped)[:RAW_LIMIT].strip()
        if redacted in seen or stripped in seen:
            by = owner.get(stripped) or owner.get(redacted) or adapter.name
            out.lines_by_adapter[by] = out.lines_by_adapter.get(by, 0) + 1
            continue
        out.skipped += 1
        if len(out.examples) < 3:
            out.examples.append(redact_text(stripped)[:160])
    return out


def run(adapter: Adapter, raw: bytes | str, ctx: Context) -> list[Decoded]:
    """Parse with `adapter`, then validate every draft like canonical input."""
    return run_report(adapter, raw, ctx)[0]


def run_report(adapter: Adapter, raw: bytes | str, ctx: Context) -> tuple[list[Decoded],
                                                                           Report]:
    """`run`, and what it skipped."""
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
    out = _run(adapter, text, ctx)
    return out, report(adapter, text, out)


def _run(adapter: Adapter, text: str, ctx: Context) -> list[Decoded]:
    out: list[Decoded] = []
    stage = f"adapter.{adapter.name}"
    try:
        records = adapter.parse(text, ctx)
    except ParseError as exc:
        return [_dead(stage, ParseError(exc.field, f"{adapter.name}: {exc.reason}"), text,
                      producer=ctx.producer, ref=ctx.origin, received_at=ctx.observed_at)]
    except RecursionError:
        return [_dead(stage, f"{adapter.name}: nested too deep to parse", text,
                      producer=ctx.producer, ref=ctx.origin, received_at=ctx.observed_at)]
    except Exception as exc:  # an adapter bug must cost the payload, never the process
        log.exception("adapter %s failed on %s", adapter.name, ctx.origin)
        return [_dead(stage, f"{adapter.name} could not read it ({type(exc).__name__}); "
                      "this is a bug in the adapter, please report it", text,
                      producer=ctx.producer, ref=ctx.origin, received_at=ctx.observed_at)]
    for i, record in enumerate(records):
        ref = f"{ctx.origin}#{i}"
        if isinstance(record, Reject):
            out.append(_dead(stage, ParseError(record.field, f"{adapter.name}: {record.reason}"),
                             record.payload, producer=ctx.producer, ref=record.ref or ref,
                             received_at=ctx.observed_at))
            continue
        draft = {"cluster": ctx.cluster, "producer": ctx.producer, **record}
        try:
            out.append(to_event(draft, producer=ctx.producer, observed_at=ctx.observed_at))
        except ParseError as exc:
            out.append(_dead(stage, ParseError(exc.field, f"{adapter.name}: {exc.reason}"),
                             json.dumps(record, default=str), producer=ctx.producer, ref=ref,
                             received_at=ctx.observed_at))
    return out


@dataclass(frozen=True)
class AdapterConfig:
    """Mapping files for the adapters whose mapping is data (validated when loaded)."""

    alert_mapping: dict[str, dict[str, Any]] | None = None
    cloudevents_mapping: dict[str, dict[str, Any]] | None = None

    @classmethod
    def load(cls, alert_mapping: str = "", cloudevents_mapping: str = "") -> AdapterConfig:
        from ingest import alertmanager, cloudevents

        alerts = None
        if alert_mapping:
            # the file's entries add to (and override) the built-in ones
            alerts = {**alertmanager.DEFAULT_MAPPING,
                      **alertmanager.load_mapping(Path(alert_mapping))}
        events = cloudevents.load_mapping(cloudevents_mapping) if cloudevents_mapping else None
        return cls(alerts, events)


def registry(config: AdapterConfig | None = None) -> dict[str, Adapter]:
    from ingest import (
        alertmanager,
        cloudevents,
        dcgm_exporter,
        grafana,
        ibstat,
        kubernetes,
        nccl,
        node_log,
        slurm,
        slurm_text,
        slurm_tools,
        xid,
    )

    config = config or AdapterConfig()
    alerts, events = config.alert_mapping, config.cloudevents_mapping
    adapters = [
        replace(alertmanager.ADAPTER,
                parse=lambda text, ctx: alertmanager.parse(text, ctx, alerts)),
        replace(grafana.ADAPTER, parse=lambda text, ctx: grafana.parse(text, ctx, alerts)),
        replace(cloudevents.ADAPTER,
                parse=lambda text, ctx: cloudevents.parse(text, ctx, events)),
        xid.ADAPTER, nccl.ADAPTER, node_log.ADAPTER, slurm.ADAPTER, slurm_text.SCONTROL,
        slurm_text.SLURMCTLD, kubernetes.ADAPTER, slurm_tools.SACCT, slurm_tools.SQUEUE,
        slurm_tools.SINFO, ibstat.ADAPTER, dcgm_exporter.ADAPTER,
    ]
    found = {a.name: a for a in adapters}
    from ingest import auto

    found["auto"] = Adapter("auto", lambda text, ctx: auto.parse(text, ctx, found),
                            doc="sniff: a JSON document by its shape, text line by line to the "
                                "adapter that reads it", line_oriented=True)
    return found
