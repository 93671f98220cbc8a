"""Producers that already speak the canonical model: JSON objects, arrays and JSON lines.

`decode(raw, ...)` never raises: each input record becomes either a validated, redacted
`Event` or a `DeadLetter` saying which record, which field and why. That is the contract the
property tests hold every input to.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from ingest.redact import MASK, clip, is_sensitive_key, redact_key, redact_text
from schemas.dead_letters import DeadLetter
from schemas.events import Event, natural_id, parse_time
from schemas.registry import lookup, validate_attributes

Decoded = Event | DeadLetter

_MAX_RECORD_BYTES = 1_000_000
MAX_DEPTH = 32
"""Attributes nest at most this deep; deeper is a dead letter naming where (a 500-level or
100k-level document is an attack or a bug, never a cluster event)."""
_ENVELOPE_TEXT = ("project", "cluster", "job_id", "entity", "node", "message", "producer")


class ParseError(Exception):
    """A record we cannot accept; `field` is the dotted path of the offending key."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}" if field else reason)
        self.field = field
        self.reason = reason


def _loc(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc)


def loads(text: str | bytes) -> Any:
    """JSON as Python's parser reads it (NaN/Infinity become floats, which `clean` then
    refuses naming the field; too deep raises RecursionError, which callers dead-letter)."""
    return json.loads(text)


def _text(value: str, where: str) -> str:
    if "\x00" in value:
        raise ParseError(where, "contains a NUL character")
    return redact_text(value)


def clean(value: Any, where: str, depth: int = 0) -> Any:
    """A redacted copy of a JSON value, or ParseError(field, reason) for what is refused:
    nesting deeper than MAX_DEPTH, NUL characters, non-finite numbers. Keys are redacted
    like values (a token used as a map key), values under sensitive keys masked whole."""
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, str):
        return _text(value, where)
    if isinstance(value, float) and not math.isfinite(value):
        raise ParseError(where, "not a finite number (NaN and Infinity are refused)")
    if isinstance(value, dict | list):
        if depth >= MAX_DEPTH:
            raise ParseError(where, f"nested deeper than {MAX_DEPTH} levels")
        if isinstance(value, list):
            return [clean(v, f"{where}.{i}", depth + 1) for i, v in enumerate(value)]
        out: dict[str, Any] = {}
        for k, v in value.items():
            key = str(k)
            if "\x00" in key:
                raise ParseError(where, "a key contains a NUL character")
            inner = f"{where}.{key[:64]}"
            if is_sensitive_key(key) and v not in (None, "", [], {}) and \
                    not isinstance(v, bool):
                out[redact_key(key)] = MASK
            else:
                out[redact_key(key)] = clean(v, inner, depth + 1)
        return out
    return value


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
    attributes = data.get("attributes", {})
    if attributes is None:
        attributes = {}
    if not isinstance(attributes, dict):
        raise ParseError("attributes", "must be a JSON object")
    attributes = clean(attributes, "attributes", 1)
    try:
        data["attributes"] = validate_attributes(event_type, attributes)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ParseError(_loc(("attributes", *first["loc"])), first["msg"]) from None
    data.setdefault("source", event_type.source.value)
    data.setdefault("producer", producer)
    data["observed_at"] = observed_at
    for name in _ENVELOPE_TEXT:
        if isinstance(data.get(name), str):
            data[name] = _text(data[name], name)
    given = data.get("id")
    if isinstance(given, str) and given:
        if "\x00" in given:
            raise ParseError("id", "contains a NUL character")
        if redact_text(given) != given:
            # a credential in the id: keep the id stable (redelivery still dedups), not the
            # secret
            data["id"] = "redacted-" + hashlib.sha256(given.encode()).hexdigest()[:32]
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
    # redact the whole payload, then cut it: a token cut first would no longer match; the
    # id hashes what arrived, so two inputs that redact alike stay two dead letters
    text = clip(payload, _MAX_RECORD_BYTES)
    return DeadLetter(
        id=DeadLetter.make_id(stage, payload, ref),
        stage=stage,
        reason=redact_text(reason),
        field=redact_text(field),
        producer=redact_text(producer),
        event_ref=redact_text(ref),
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


def _whole(raw: bytes | str) -> str | None:
    """The payload as text when it can be one JSON document: valid UTF-8, no raw NUL."""
    if isinstance(raw, str):
        return None if "\x00" in raw else raw
    if b"\x00" in raw:
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _lines(raw: bytes | str) -> list[bytes] | list[str]:
    return raw.split(b"\n") if isinstance(raw, bytes) else raw.split("\n")


def decode(raw: bytes | str, *, producer: str, observed_at: datetime,
           origin: str = "input") -> list[Decoded]:
    """One payload: a JSON object, a JSON array of objects (a batch), or JSON lines.

    Every record is judged alone: a NUL byte, invalid UTF-8, broken JSON or a bad field
    dead-letters that line or array element, never its neighbours."""
    text = _whole(raw)
    stripped = text.strip() if text is not None else ""
    if text is not None and not stripped:
        return [_dead("ingest.decode", "empty payload", text, producer=producer,
                      ref=origin, received_at=observed_at)]
    value: Any = None
    if text is not None:
        try:
            value = loads(stripped)
        except (ValueError, RecursionError):
            text = None
    if text is None or not isinstance(value, list | dict):
        out = list(decode_lines(_lines(raw), producer=producer, observed_at=observed_at,
                                origin=origin))
        return out or [_dead("ingest.decode", "empty payload", _as_text(raw),
                             producer=producer, ref=origin, received_at=observed_at)]
    if isinstance(value, list):
        return [
            decode_value(item, json.dumps(item, default=str), producer=producer,
                         observed_at=observed_at, position=f"{origin}[{i}]")
            for i, item in enumerate(value)
        ] or [_dead("ingest.decode", "empty batch", stripped, producer=producer, ref=origin,
                    received_at=observed_at)]
    return [decode_value(value, stripped, producer=producer, observed_at=observed_at,
                         position=origin)]


def _line(raw_line: bytes | str) -> tuple[str, str]:
    """(text, why it is refused or '')."""
    if isinstance(raw_line, bytes):
        if b"\x00" in raw_line:
            column = raw_line.index(b"\x00") + 1
            return (raw_line.replace(b"\x00", b"\\0").decode("utf-8", "replace"),
                    f"contains a NUL byte at column {column}")
        try:
            return raw_line.decode("utf-8"), ""
        except UnicodeDecodeError as exc:
            return (raw_line.decode("utf-8", "replace"),
                    f"not valid UTF-8 (byte {exc.start + 1} of the line)")
    if "\x00" in raw_line:
        return raw_line.replace("\x00", "\\0"), \
            f"contains a NUL byte at column {raw_line.index(chr(0)) + 1}"
    return raw_line, ""


def decode_lines(lines: Iterable[str | bytes], *, producer: str, observed_at: datetime,
                 origin: str = "input") -> Iterator[Decoded]:
    """JSON lines; blank lines are skipped, every other line yields exactly one result."""
    for number, raw_line in enumerate(lines, start=1):
        text, refused = _line(raw_line)
        line = text.strip()
        if not line:
            continue
        position = f"{origin}:{number}"
        if refused:
            yield _dead("ingest.decode", refused, line, producer=producer, ref=position,
                        received_at=observed_at)
            continue
        if len(line) > _MAX_RECORD_BYTES:
            yield _dead("ingest.decode", f"record larger than {_MAX_RECORD_BYTES} bytes", line,
                        producer=producer, ref=position, received_at=observed_at)
            continue
        try:
            value = loads(line)
        except RecursionError:
            yield _dead("ingest.decode", "not JSON we accept: nested too deep to parse", line,
                        producer=producer, ref=position, received_at=observed_at)
            continue
        except ValueError as exc:
            yield _dead("ingest.decode", f"not JSON: {exc}", line, producer=producer,
                        ref=position, received_at=observed_at)
            continue
        yield decode_value(value, line, producer=producer, observed_at=observed_at,
                           position=position)


def decode_trusted(raw: bytes | str) -> Event | None:
    """The fast path for a record ingest already validated and redacted: pydantic's JSON
    parser on the envelope, or None when that fails (then it takes the whole path)."""
    try:
        event = Event.model_validate_json(raw)
    except ValidationError:
        return None
    return event if lookup(event.type) is not None else None


def decode_canonical(raw: bytes | str, *, stage: str = "process.decode",
                     position: str = "message", trusted: bool = False) -> Decoded:
    """A record from `jobtrail.events` (or the embedded log).

    `trusted` (the embedded log: written by this process's own ingest, under its home)
    takes the fast path, pydantic's JSON parser. Anything else takes the whole ingest path
    again (strict JSON, typed attributes, redaction): a producer that wrote to the topic
    without going through ingest still cannot store a secret or a malformed event."""
    if trusted:
        event = decode_trusted(raw)
        if event is not None:
            return event
    text, refused = _line(raw)
    if refused:
        return _dead(stage, refused, text, producer="", ref=position,
                     received_at=datetime.now(UTC))
    try:
        value = loads(text)
    except (ValueError, RecursionError) as exc:
        why = "nested too deep to parse" if isinstance(exc, RecursionError) else str(exc)
        return _dead(stage, f"not JSON: {why}", text, producer="", ref=position,
                     received_at=datetime.now(UTC))
    producer = str(value.get("producer") or "") if isinstance(value, dict) else ""
    observed = datetime.now(UTC)
    if isinstance(value, dict) and value.get("observed_at") is not None:
        with contextlib.suppress(ValueError):  # when ingest observed it, not the worker
            observed = parse_time(value["observed_at"])
    result = decode_value(value, text, producer=producer or "unknown", observed_at=observed,
                          position=position)
    if isinstance(result, DeadLetter):
        return result.model_copy(update={"stage": stage,
                                         "id": DeadLetter.make_id(stage, result.payload,
                                                                  result.event_ref)})
    return result
