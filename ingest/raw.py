"""The `jobtrail.raw` route: a raw payload as a source sent it, plus who sent it -> decoded.

A raw message's value is the payload exactly as received (an Alertmanager webhook body, a
chunk of kernel log, a structured CloudEvent). The adapter is the `jobtrail-adapter` header,
else the message key, else `cloudevents` when the content type says
`application/cloudevents+json` (CloudEvents' structured mode over Kafka). The shipper's
context travels in headers: `jobtrail-cluster`, `jobtrail-project`, `jobtrail-job`,
`jobtrail-attempt`, `jobtrail-node`, `jobtrail-producer`. The observed time is the message
timestamp, so replaying the raw topic reproduces the same events and ids.

Shippers that cannot set Kafka headers (rsyslog 8.2302's omkafka has no `kafkaHeader`) send a
JSON envelope instead, one log line per message (deploy/rsyslog/ renders it):
`{"envelope": "jobtrail/1", "adapter": "node-log", "cluster": ..., "node": ..., "project":
..., "job": ..., "attempt": ..., "ts": <RFC 3339, when the shipper read the line>, "msg":
<the line>, ...}`. The envelope's fields take the place of the headers, `msg` is the payload,
and `ts` is the observed time: a line without a time of its own gets the time the shipper
read it, and a redelivered envelope gives the same ids.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ingest.adapters import Adapter, Context, run
from ingest.canonical import Decoded, ParseError, _dead, decode
from ingest.redact import clip
from schemas.events import parse_time

HEADER_PREFIX = "jobtrail-"
ENVELOPE = "jobtrail/1"
_ENVELOPE_FIELDS = ("adapter", "cluster", "project", "job", "attempt", "node", "producer")


def adapter_name(key: str, headers: Mapping[str, str]) -> str:
    named = headers.get("jobtrail-adapter") or key
    if not named and "cloudevents" in headers.get("content-type", ""):
        return "cloudevents"
    return named


def decode_raw(value: bytes, key: str, headers: Mapping[str, str], observed_at: datetime,
               ref: str, adapters: Mapping[str, Adapter]) -> list[Decoded]:
    """One raw message -> events and dead letters (never raises for bad input)."""
    opened = open_envelope(value)
    if opened is not None:
        value, context, when = opened
        headers = {**headers, **context}
        observed_at = when or observed_at
    name = adapter_name(key, headers)
    producer = headers.get("jobtrail-producer") or name or "raw"
    if name == "canonical":
        return decode(value, producer=producer, observed_at=observed_at, origin=ref)
    adapter = adapters.get(name)
    if adapter is None:
        reason = (f"no adapter {name!r} (one of: canonical, {', '.join(sorted(adapters))})"
                  if name else "no adapter named: set the key or the jobtrail-adapter header")
        return [_dead("raw", ParseError("key", reason),
                      value.decode("utf-8", errors="replace"), producer=producer, ref=ref,
                      received_at=observed_at)]
    attempt = headers.get("jobtrail-attempt", "")
    ctx = Context(producer=clip(producer, 128), observed_at=observed_at,
                  cluster=headers.get("jobtrail-cluster") or "default",
                  project=headers.get("jobtrail-project", ""),
                  job_id=headers.get("jobtrail-job", ""),
                  attempt=int(attempt) if attempt.isdigit() else None,
                  node=headers.get("jobtrail-node", ""), origin=ref)
    return run(adapter, value, ctx)


def text_headers(raw: object) -> dict[str, str]:
    """Kafka headers (a list of (name, bytes) or a mapping) -> lower-cased text."""
    items: Any = raw.items() if isinstance(raw, Mapping) else (raw or [])
    out: dict[str, str] = {}
    for name, value in items:
        text = value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)
        out[str(name).lower()] = text
    return out


def open_envelope(value: bytes) -> tuple[bytes, dict[str, str], datetime | None] | None:
    """(payload, context as headers, the shipper's time) of a `jobtrail/1` envelope, or None
    when the value is not one (then it is the payload itself)."""
    head = value[:200].lstrip()
    if not head.startswith(b"{") or b'"envelope"' not in head:
        return None
    try:
        doc = json.loads(value)
    except ValueError:
        return None
    if not isinstance(doc, dict) or doc.get("envelope") != ENVELOPE:
        return None
    context = {f"{HEADER_PREFIX}{name}": str(doc[name]).strip() for name in _ENVELOPE_FIELDS
               if doc.get(name) not in (None, "")}
    if "jobtrail-producer" not in context and context.get("jobtrail-node"):
        context["jobtrail-producer"] = f"rsyslog@{context['jobtrail-node']}"
    when: datetime | None = None
    try:
        when = parse_time(str(doc["ts"])) if doc.get("ts") else None
    except (ValueError, TypeError):
        when = None
    # syslog's msg of a socket message starts with the space after the tag
    message = str(doc.get("msg") or "")
    return message.strip().encode(), context, when
