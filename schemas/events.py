"""The canonical event: one envelope for everything a cluster says (DESIGN §3).

Every producer (adapter, HTTP client, log shipper) ends up here. The envelope is closed
(unknown top-level keys are an error naming the key) while attributes are typed per `type`
through the registry in `schemas.registry` and keep unknown extra keys.

Ids are the idempotency key everywhere: a producer's id is kept, otherwise the id is a hash of
the source and the event's natural key, so re-reading the same payload gives the same id.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

SCHEMA_VERSION = 1


class Source(StrEnum):
    scheduler = "scheduler"
    network = "network"
    storage = "storage"
    node = "node"
    job = "job"
    change = "change"
    operator = "operator"
    topology = "topology"


class Severity(StrEnum):
    debug = "debug"
    info = "info"
    warning = "warning"
    error = "error"
    critical = "critical"


class Scope(StrEnum):
    """The kind of physical entity an event is about; `Event.entity` names the instance."""

    job = "job"
    node = "node"
    gpu = "gpu"
    rank = "rank"
    nic = "nic"
    switch = "switch"
    port = "port"
    filesystem = "filesystem"
    target = "target"
    path = "path"
    queue = "queue"
    cluster = "cluster"


def parse_time(value: Any) -> datetime:
    """Accept ISO-8601 strings and epoch seconds or milliseconds; naive times are UTC.

    Timezone-less timestamps are common in logs; treating them as UTC is documented in
    docs/events.md. The result is truncated to milliseconds, the resolution we store.
    """
    if isinstance(value, datetime):
        if value.tzinfo is UTC and value.microsecond % 1000 == 0 and 1970 <= value.year <= 2200:
            return value  # already what we store (the hot path: re-validated events)
        dt = value
    elif isinstance(value, str):
        try:
            dt = datetime.fromisoformat(value)  # 3.11 reads `Z` and most ISO forms itself
        except ValueError:
            text = value.strip()
            if text.endswith(("Z", "z")):
                text = text[:-1] + "+00:00"
            try:
                dt = datetime.fromisoformat(text)
            except ValueError as exc:
                raise ValueError(f"time {value!r} is not ISO-8601") from exc
    elif isinstance(value, bool):
        raise ValueError("time must be an ISO-8601 string or epoch number, not a boolean")
    elif isinstance(value, int | float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError("time is not a finite number")
        seconds = value / 1000.0 if abs(value) >= 1e11 else float(value)
        try:
            dt = datetime.fromtimestamp(seconds, tz=UTC)
        except (OverflowError, OSError, ValueError) as exc:
            raise ValueError(f"time {value!r} is out of range") from exc
    else:
        kind = type(value).__name__
        raise ValueError(f"time must be an ISO-8601 string or epoch number, not {kind}")
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    elif dt.tzinfo is not UTC:
        dt = dt.astimezone(UTC)
    if not 1970 <= dt.year <= 2200:
        raise ValueError(f"time {value!r} is outside 1970..2200")
    if dt.microsecond % 1000:
        dt = dt.replace(microsecond=(dt.microsecond // 1000) * 1000)
    return dt


class Event(BaseModel):
    """The canonical envelope. Frozen: processors never mutate what they were given."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_enum_values=False)

    schema_version: int = Field(default=SCHEMA_VERSION, strict=True)
    id: str = Field(min_length=1, max_length=128)
    type: str
    source: Source
    time: datetime
    observed_at: datetime | None = None
    severity: Severity = Severity.info
    project: str = Field(default="", max_length=128)
    cluster: str = Field(min_length=1, max_length=128)
    job_id: str | None = Field(default=None, max_length=256)
    # strict: `"2"` or `true` for an attempt is a producer bug to report, not to guess
    attempt: int | None = Field(default=None, ge=0, le=1_000_000, strict=True)
    scope: Scope | None = None
    entity: str | None = Field(default=None, max_length=512)
    node: str | None = Field(default=None, max_length=256)
    message: str = Field(default="", max_length=16_384)
    attributes: dict[str, Any] = Field(default_factory=dict)
    producer: str = Field(default="unknown", max_length=256)

    @field_validator("time", "observed_at", mode="before")
    @classmethod
    def _time(cls, value: Any) -> Any:
        return None if value is None else parse_time(value)

    @property
    def attempt_or_first(self) -> int:
        """Scheduler events without an attempt number belong to the first attempt."""
        return self.attempt if self.attempt is not None else 1

    def to_json(self) -> str:
        return self.model_dump_json(exclude_none=True)

    def digest(self) -> str:
        """What the event says (not when or by whom it was observed): two records with one
        id and the same digest are the same event sent twice; otherwise a conflict."""
        # the serializer itself: the bytes `model_dump_json` would return as text, without
        # its wrapper and a decode/encode (once per stored event)
        body = self.__pydantic_serializer__.to_json(self, exclude=_NOT_CONTENT,
                                                    exclude_none=True)
        return hashlib.sha256(body).hexdigest()[:24]

    def differences(self, other: Event) -> list[str]:
        """Envelope fields (and `attributes`) whose values differ, in envelope order."""
        return [name for name in type(self).model_fields
                if name not in _NOT_CONTENT and getattr(self, name) != getattr(other, name)]


_NOT_CONTENT = {"id", "observed_at", "producer"}


def natural_id(source: str, payload: dict[str, Any]) -> str:
    """A stable id from the source and the event's natural key (everything but observed_at)."""
    key = {k: v for k, v in payload.items() if k not in ("id", "observed_at", "producer")}
    canonical = json.dumps([source, key], sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]
