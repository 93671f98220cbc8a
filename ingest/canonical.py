"""Producers that already speak the canonical model: JSON objects, arrays and JSON lines.

`decode(raw, ...)` never raises: each input record becomes either a validated, redacted
`Event` or a `DeadLetter` saying which record, which field and why. That is the contract the
property tests hold every input to.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from ingest.redact import redact_text, redact_value
from schemas.dead_letters import DeadLetter
from schemas.events import Event, natural_id
from schemas.registry import lookup, validate_attributes

Decoded = Event | DeadLetter

_MAX_RECORD_BYTES = 1_000_000


class ParseError(Exception):
    """A record we cannot accept; `field` is the dotted path of the offending key."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}" if field else reason)
        self.field = field
        self.reason = reason


def _loc(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc)


def to_event(obj: Any, *, producer: str, observed_at: datetime) -> Event:
    """Validate one JSON value as a canonical event, redacting before anything else."""
    if not isinstance(obj, dict):
        raise ParseError("", f"an event must be a JSON object, got {type(obj).__name__}")
    data: dict[str, Any] = dict(obj)
    type_name = data.get("type")
    if not isinstance(type_name, str) or not type_name:
        raise ParseError("type", "missing or not a string")
    event_type = lookup(type_name)
    if event_type is None:
        raise ParseError("type", f"unknown event type {type_name!r} (see `jobtrail schema types`)")
    if "message" in data and isinstance(data["message"], str):
        data["message"] = redact_text(data["message"])
    attributes = data.get("attributes", {})
    if attributes is None:
        attributes = {}
    if not isinstance(attributes, dict):
        raise ParseError("attributes", "must be a JSON object")
    attributes = redact_value(attributes)
    try:
        data["attributes"] = validate_attributes(event_type, attributes)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ParseError(_loc(("attributes", *first["loc"])), first["msg"]) from None
    data.setdefault("source", event_type.source.value)
    data.setdefault("producer", producer)
    data["observed_at"] = observed_at
    if event_type.job_scoped:
        for required in ("job_id", "project"):
            if not data.get(required):
                raise ParseError(required, f"required for {type_name}")
    derive_id = not data.get("id")
    if derive_id:
        data["id"] = "derived"
    try:
        event = Event.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ParseError(_loc(first["loc"]), first["msg"]) from None
    if derive_id:
        # hash the normalised values, so `"time": 1767225600` and its ISO form agree
        key = event.model_dump(mode="json", exclude={"id", "observed_at", "producer"})
        event = event.model_copy(update={"id": natural_id(event.source.value, key)})
    return event


def _ref(obj: Any, position: str) -> str:
    if isinstance(obj, dict):
        ident = obj.get("id")
        if isinstance(ident, str) and ident:
            return f"{position} (id {ident[:64]})"
    return position


def _dead(stage: str, exc: ParseError | str, payload: str, *, producer: str, ref: str,
          received_at: datetime) -> DeadLetter:
    field, reason = (exc.field, exc.reason) if isinstance(exc, ParseError) else ("", exc)
    text = redact_text(payload[:_MAX_RECORD_BYTES])
    return DeadLetter(
        id=DeadLetter.make_id(stage, text, ref),
        stage=stage,
        reason=reason,
        field=field,
        producer=producer,
        event_ref=ref,
        payload=text,
        received_at=received_at,
    )


def decode_value(obj: Any, raw: str, *, producer: str, observed_at: datetime,
                 position: str) -> Decoded:
    ref = _ref(obj, position)
    try:
        return to_event(obj, producer=producer, observed_at=observed_at)
    except ParseError as exc:
        return _dead("ingest.validate", exc, raw, producer=producer, ref=ref,
                     received_at=observed_at)


def _as_text(raw: bytes | str) -> str:
    if isinstance(raw, bytes):
        return raw.decode("utf-8", errors="replace")
    return raw


def decode(raw: bytes | str, *, producer: str, observed_at: datetime,
           origin: str = "input") -> list[Decoded]:
    """One payload: a JSON object, a JSON array of objects (a batch), or JSON lines."""
    text = _as_text(raw)
    stripped = text.strip()
    if not stripped:
        return [_dead("ingest.decode", "empty payload", text, producer=producer,
                      ref=origin, received_at=observed_at)]
    if isinstance(raw, bytes) and b"\x00" in raw:
        return [_dead("ingest.decode", "payload contains NUL bytes", text, producer=producer,
                      ref=origin, received_at=observed_at)]
    try:
        value = json.loads(stripped)
    except (ValueError, RecursionError):
        return list(decode_lines(text.splitlines(), producer=producer, observed_at=observed_at,
                                 origin=origin))
    if isinstance(value, list):
        return [
            decode_value(item, json.dumps(item, default=str), producer=producer,
                         observed_at=observed_at, position=f"{origin}[{i}]")
            for i, item in enumerate(value)
        ] or [_dead("ingest.decode", "empty batch", text, producer=producer, ref=origin,
                    received_at=observed_at)]
    return [decode_value(value, stripped, producer=producer, observed_at=observed_at,
                         position=origin)]


def decode_lines(lines: Iterable[str | bytes], *, producer: str, observed_at: datetime,
                 origin: str = "input") -> Iterator[Decoded]:
    """JSON lines; blank lines are skipped, every other line yields exactly one result."""
    for number, raw_line in enumerate(lines, start=1):
        line = _as_text(raw_line).strip()
        if not line:
            continue
        position = f"{origin}:{number}"
        if len(line) > _MAX_RECORD_BYTES:
            yield _dead("ingest.decode", f"record larger than {_MAX_RECORD_BYTES} bytes", line,
                        producer=producer, ref=position, received_at=observed_at)
            continue
        try:
            value = json.loads(line)
        except (ValueError, RecursionError) as exc:
            yield _dead("ingest.decode", f"not JSON: {exc}", line, producer=producer,
                        ref=position, received_at=observed_at)
            continue
        yield decode_value(value, line, producer=producer, observed_at=observed_at,
                           position=position)


def decode_canonical(raw: bytes | str, *, stage: str = "process.decode",
                     position: str = "message") -> Decoded:
    """A record from `jobtrail.events` (or the embedded log), written by ingest.

    The fast path validates the envelope in pydantic's JSON parser; anything unusual takes
    the full ingest path again (typed attributes, redaction) so a producer that bypassed
    ingest still cannot store a secret or a malformed event.
    """
    try:
        event = Event.model_validate_json(raw)
        if lookup(event.type) is not None:
            return event
    except ValidationError:
        pass
    text = _as_text(raw)
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        return _dead(stage, f"not JSON: {exc}", text, producer="", ref=position,
                     received_at=datetime.now(UTC))
    producer = str(value.get("producer") or "") if isinstance(value, dict) else ""
    observed = datetime.now(UTC)
    result = decode_value(value, text, producer=producer or "unknown", observed_at=observed,
                          position=position)
    if isinstance(result, DeadLetter):
        return result.model_copy(update={"stage": stage,
                                         "id": DeadLetter.make_id(stage, result.payload,
                                                                  result.event_ref)})
    return result
