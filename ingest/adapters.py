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
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ingest import hostlist
from ingest.base import (
    JSON_DOCUMENT,
    RAW_LIMIT,
    Adapter,
    Context,
    Reject,
    cap_lines,
    fill,
    is_json_document,
    json_object,
    line_time,
    raw_evidence,
)
from ingest.canonical import Decoded, ParseError, _dead, to_event
from ingest.redact import clip

__all__ = ["RAW_LIMIT", "Adapter", "AdapterConfig", "Context", "Reject", "Report", "fill",
           "json_object", "line_time", "raw_evidence", "registry", "report", "run",
           "run_report"]

log = logging.getLogger("jobtrail.adapters")


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
    if not adapter.line_oriented or JSON_DOCUMENT.match(text):
        return out  # a document, not lines (sinfo --json; what auto routed by shape)
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        out.lines += 1
        redacted = clip(stripped, RAW_LIMIT).strip()
        if redacted in seen or stripped in seen:
            by = owner.get(stripped) or owner.get(redacted) or adapter.name
            out.lines_by_adapter[by] = out.lines_by_adapter.get(by, 0) + 1
            continue
        out.skipped += 1
        if len(out.examples) < 3:
            out.examples.append(clip(stripped, 160))
    return out


def run(adapter: Adapter, raw: bytes | str, ctx: Context) -> list[Decoded]:
    """Parse with `adapter`, then validate every draft like canonical input."""
    text, cut = _capped(adapter, _text(raw), ctx)
    return _run(adapter, text, _dated(ctx, text), cut)


def run_report(adapter: Adapter, raw: bytes | str, ctx: Context) -> tuple[list[Decoded],
                                                                           Report]:
    """`run`, and what it skipped."""
    text, cut = _capped(adapter, _text(raw), ctx)
    out = _run(adapter, text, _dated(ctx, text), cut)
    return out, report(adapter, text, out)


def _dated(ctx: Context, text: str) -> Context:
    """`ctx` with the full date the payload states, where its year-less lines take their
    year from (unless the shipper named the year)."""
    from ingest.timestamps import stated_date

    if ctx.year or ctx.reference is not None or not text:
        return ctx
    stated = stated_date(text)
    return replace(ctx, reference=stated) if stated is not None else ctx


def _text(raw: bytes | str) -> str:
    return raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw


def _capped(adapter: Adapter, text: str, ctx: Context) -> tuple[str, list[Reject]]:
    """A line adapter's input with over-long lines cut at its cap (`auto` caps its own line
    path: a JSON document it routes is not lines)."""
    if not adapter.line_oriented or adapter.name == "auto":
        return text, []
    cut_text, cut = cap_lines(text, adapter.max_line, adapter.name, ctx.origin)
    if cut and is_json_document(text):
        return text, []
    return cut_text, cut


def _run(adapter: Adapter, text: str, ctx: Context, cut: list[Reject]) -> list[Decoded]:
    stage = f"adapter.{adapter.name}"
    try:
        with hostlist.budget():  # every hostlist of one payload shares one limit
            records = adapter.parse(text, ctx)
    except ParseError as exc:
        return [_dead(stage, ParseError(exc.field, f"{adapter.name}: {exc.reason}"), text,
                      producer=ctx.producer, ref=ctx.origin, received_at=ctx.observed_at),
                *_decoded(adapter, cut, ctx)]
    except RecursionError:
        return [_dead(stage, f"{adapter.name}: nested too deep to parse", text,
                      producer=ctx.producer, ref=ctx.origin, received_at=ctx.observed_at),
                *_decoded(adapter, cut, ctx)]
    except Exception as exc:  # an adapter bug must cost the payload, never the process
        log.exception("adapter %s failed on %s", adapter.name, ctx.origin)
        return [_dead(stage, f"{adapter.name} could not read it ({type(exc).__name__}); "
                      "this is a bug in the adapter, please report it", text,
                      producer=ctx.producer, ref=ctx.origin, received_at=ctx.observed_at),
                *_decoded(adapter, cut, ctx)]
    return _decoded(adapter, [*records, *cut], ctx)


def _decoded(adapter: Adapter, records: Sequence[dict[str, Any] | Reject],
             ctx: Context) -> list[Decoded]:
    out: list[Decoded] = []
    stage = f"adapter.{adapter.name}"
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
        ipmi,
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
        slurm_tools.SINFO, ibstat.ADAPTER, dcgm_exporter.ADAPTER, ipmi.ADAPTER,
    ]
    found = {a.name: a for a in adapters}
    from ingest import auto

    found["auto"] = Adapter("auto", lambda text, ctx: auto.parse(text, ctx, found),
                            doc="sniff: a JSON document by its shape, text line by line to the "
                                "adapter that reads it", line_oriented=True)
    return found
