"""A rejected input: what was received, at which stage, and why (DESIGN §2, nothing dropped)."""

from __future__ import annotations

import hashlib
from datetime import datetime

from pydantic import BaseModel, ConfigDict


class DeadLetter(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    stage: str
    """Where it was rejected: `ingest.decode`, `ingest.validate`, `process`, ..."""
    reason: str
    field: str = ""
    """Dotted path of the offending field, empty when the whole payload is unreadable."""
    producer: str = ""
    event_ref: str = ""
    """The event's id or position (`line 12`) so a human can find it in the source."""
    payload: str
    """The original payload, redacted."""
    received_at: datetime

    @staticmethod
    def make_id(stage: str, payload: str, ref: str) -> str:
        """Deterministic, so redelivering the same bad input does not add a second row."""
        digest = hashlib.sha256(f"{stage}\x00{ref}\x00{payload}".encode()).hexdigest()
        return digest[:32]
