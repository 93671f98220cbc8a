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
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ingest.canonical import Decoded, ParseError, _dead, to_event
from ingest.redact import redact_text

RAW_LIMIT = 4096


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
    return redact_text(text[:RAW_LIMIT])


def run(adapter: Adapter, raw: bytes | str, ctx: Context) -> list[Decoded]:
    """Parse with `adapter`, then validate every draft like canonical input."""
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
    out: list[Decoded] = []
    stage = f"adapter.{adapter.name}"
    try:
        records = adapter.parse(text, ctx)
    except ParseError as exc:
        return [_dead(stage, ParseError(exc.field, f"{adapter.name}: {exc.reason}"), text,
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


def registry() -> dict[str, Adapter]:
    from ingest import alertmanager, kubernetes, nccl, slurm, xid

    adapters = [alertmanager.ADAPTER, xid.ADAPTER, nccl.ADAPTER, slurm.ADAPTER,
                kubernetes.ADAPTER]
    return {a.name: a for a in adapters}
