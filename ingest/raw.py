"""The `jobtrail.raw` route: a raw payload as a source sent it, plus who sent it -> decoded.

A raw message's value is the payload exactly as received (an Alertmanager webhook body, a
chunk of kernel log, a structured CloudEvent). The adapter is the `jobtrail-adapter` header,
else the message key, else `cloudevents` when the content type says
`application/cloudevents+json` (CloudEvents' structured mode over Kafka). The shipper's
context travels in headers: `jobtrail-cluster`, `jobtrail-project`, `jobtrail-job`,
`jobtrail-attempt`, `jobtrail-node`, `jobtrail-producer`. The observed time is the message
timestamp, so replaying the raw topic reproduces the same events and ids.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ingest.adapters import Adapter, Context, run
from ingest.canonical import Decoded, ParseError, _dead, decode
from ingest.redact import clip

HEADER_PREFIX = "jobtrail-"


def adapter_name(key: str, headers: Mapping[str, str]) -> str:
    named = headers.get("jobtrail-adapter") or key
    if not named and "cloudevents" in headers.get("content-type", ""):
        return "cloudevents"
    return named


def decode_raw(value: bytes, key: str, headers: Mapping[str, str], observed_at: datetime,
               ref: str, adapters: Mapping[str, Adapter]) -> list[Decoded]:
    """One raw message -> events and dead letters (never raises for bad input)."""
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
