"""The incident log's envelope: `IncidentEvent` (a typed payload from
`schemas.incident_events` with a deterministic id, a per-incident `seq`, the event time and
an `actor`), the ids, and the lifecycle table every other incident module reads.

Lifecycle: open -> acknowledged -> mitigated -> resolved -> closed, `reopened` on a regression
(resolved -> open). Nothing moves out of `closed`.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from schemas.incident_events import PAYLOADS, Payload, parse
from schemas.incident_events import Actor as Actor

KINDS = tuple(PAYLOADS)
STATUSES = ("open", "acknowledged", "mitigated", "resolved", "closed")
SEVERITIES = ("sev1", "sev2", "sev3", "sev4")

# lifecycle events: the statuses each may leave from, and where it goes
LIFECYCLE_FROM: dict[str, tuple[str, ...]] = {
    "acknowledged": ("open",),
    "mitigated": ("open", "acknowledged"),
    "resolved": ("open", "acknowledged", "mitigated"),
    "reopened": ("resolved",),
    "closed": ("resolved",),
}
LIFECYCLE_TO = {"acknowledged": "acknowledged", "mitigated": "mitigated",
                "resolved": "resolved", "reopened": "open", "closed": "closed"}
AFTER_CLOSE = {"note_added", "diagnosis_revised", "time_corrected", "postmortem_amended",
               "action_updated", "action_added", "action_proposed",
               "postmortem_drafted", "postmortem_section_edited",
               "postmortem_review_requested", "postmortem_changes_requested",
               "postmortem_approved", "postmortem_published", "learning_recorded"}
ACTION_STATUSES = ("proposed", "open", "done", "not_doing", "dismissed")
_ACTION_DONE = {"done", "not_doing", "dismissed"}


class InvalidTransition(ValueError):
    """A request the incident's current state does not allow (the message says why)."""


class IncidentEvent(BaseModel):
    """The envelope: what is stored in `incident_log` and on `jobtrail.incident-events`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    incident_id: str
    seq: int = Field(ge=1)
    kind: str
    time: datetime
    actor: Actor
    data: dict[str, Any] = Field(default_factory=dict)
    command_id: str = ""
    _payload: Payload | None = PrivateAttr(default=None)

    def payload(self) -> Payload:
        """The typed payload (parsed and upcast once, then kept)."""
        if self._payload is None:
            self._payload = parse(self.kind, self.data)
        return self._payload

    def to_json(self) -> str:
        return self.model_dump_json()


def event_id(incident_id: str, kind: str, discriminator: str) -> str:
    """Deterministic: the same decision about the same input is the same event."""
    digest = hashlib.sha256(f"{incident_id}\0{kind}\0{discriminator}".encode()).hexdigest()
    return f"ie-{digest[:24]}"


def incident_id(key: str, first_event: str) -> str:
    return "inc-" + hashlib.sha256(f"{key}\0{first_event}".encode()).hexdigest()[:16]

