"""Deciding: whether a change is allowed from the incident's current state (`check`, from
the lifecycle table), the validated event (`new_event`), and people's commands."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from processors.incidents.aggregate import Incident
from processors.incidents.envelope import (
    ACTION_STATUSES,
    AFTER_CLOSE,
    LIFECYCLE_FROM,
    LIFECYCLE_TO,
    SEVERITIES,
    Actor,
    IncidentEvent,
    InvalidTransition,
    event_id,
)
from processors.postmortem import state as postmortem
from processors.postmortem.state import PostmortemRefused
from schemas import incident_events as ev
from schemas.incident_events import Payload


def check(state: Incident | None, payload: Payload, actor: Actor | None = None) -> None:
    """Raise InvalidTransition when `payload` is not allowed from the current state (or by
    this actor: a postmortem's approver is not its author)."""
    kind = payload.KIND
    if kind == "opened":
        if state is not None and state.opened_at is not None:
            raise InvalidTransition(f"incident {state.id} is already open")
        return
    if state is None or state.opened_at is None:
        raise InvalidTransition("no such incident")
    if state.status == "closed" and kind not in AFTER_CLOSE:
        raise InvalidTransition(f"incident {state.id} is closed: {kind} is not allowed")
    allowed = LIFECYCLE_FROM.get(kind)
    if allowed and state.status not in allowed:
        raise InvalidTransition(f"cannot go to {LIFECYCLE_TO[kind]} from {state.status} "
                                f"(allowed from: {', '.join(allowed)})")
    if isinstance(payload, ev.TimeCorrected):
        if payload.at is None:
            raise InvalidTransition("correct_time: give the time it happened (at)")
        if payload.event_id not in state.story:
            raise InvalidTransition(f"no event {payload.event_id!r} of a person's on "
                                    f"{state.id} to correct (see `jobtrail incident show`)")
    if isinstance(payload, ev.SeverityChanged) and payload.severity not in SEVERITIES:
        raise InvalidTransition(f"severity must be one of {', '.join(SEVERITIES)}")
    if isinstance(payload, ev.ActionAdded | ev.ActionUpdated):
        from processors.incidents.followups import field_problem

        if problem := field_problem(payload):
            raise InvalidTransition(problem)
    if isinstance(payload, ev.ActionUpdated):
        if payload.action_id not in state.actions:
            raise InvalidTransition(f"no action {payload.action_id!r} on {state.id}")
        if payload.status is not None and payload.status not in ACTION_STATUSES:
            raise InvalidTransition(f"action status must be one of "
                                    f"{', '.join(ACTION_STATUSES)}")
        if payload.status in ("not_doing", "dismissed") and not payload.reason:
            raise InvalidTransition(f"{payload.status} needs a reason")
    if kind.startswith("postmortem_") or kind == "learning_recorded":
        try:
            postmortem.check(state.pm, payload, actor.name if actor else "", state.severity)
        except PostmortemRefused as exc:
            raise InvalidTransition(str(exc)) from None
    if isinstance(payload, ev.Closed):
        from processors.postmortem.checklist import blocking

        still = blocking(state)
        if payload.force and not payload.reason:
            raise InvalidTransition("a forced close waives the checklist: give a reason")
        if still and not payload.force:
            raise InvalidTransition(f"the commander checklist is open: {', '.join(still)} "
                                    "(finish it, or force the close with a reason)")


def new_event(state: Incident | None, incident: str, payload: Payload, time: datetime,
              actor: Actor, discriminator: str, command_id: str = "") -> IncidentEvent:
    """A validated event for `incident`, numbered after the state's last seq."""
    check(state, payload, actor)
    event = IncidentEvent(id=event_id(incident, payload.KIND, discriminator),
                          incident_id=incident, seq=(state.seq if state else 0) + 1,
                          kind=payload.KIND, time=time, actor=actor, data=payload.data(),
                          command_id=command_id)
    event._payload = payload
    return event


# --- people's commands ----------------------------------------------------------------------

COMMANDS: dict[str, type[Payload]] = {
    "ack": ev.Acknowledged, "assign": ev.OwnerAssigned, "commander": ev.CommanderAssigned,
    "note": ev.NoteAdded, "mitigate": ev.Mitigated, "resolve": ev.Resolved,
    "reopen": ev.Reopened, "close": ev.Closed, "severity": ev.SeverityChanged,
    "add_action": ev.ActionAdded, "update_action": ev.ActionUpdated,
    "accept_action": ev.ActionUpdated, "dismiss_action": ev.ActionUpdated,
    "draft_postmortem": ev.PostmortemDrafted, "publish_postmortem": ev.PostmortemPublished,
    "edit_postmortem": ev.PostmortemSectionEdited, "request_review": ev.PostmortemReviewRequested,
    "request_changes": ev.PostmortemChangesRequested,
    "approve_postmortem": ev.PostmortemApproved, "waive_postmortem": ev.PostmortemWaived,
    "record_learning": ev.LearningRecorded, "page": ev.Paged, "correct_time": ev.TimeCorrected,
    "amend_postmortem": ev.PostmortemAmended,
}
CommandName = Literal["ack", "assign", "commander", "note", "mitigate", "resolve", "reopen",
                      "close", "severity", "add_action", "update_action", "accept_action",
                      "dismiss_action", "draft_postmortem", "publish_postmortem",
                      "edit_postmortem", "request_review", "request_changes",
                      "approve_postmortem", "waive_postmortem", "record_learning", "page",
                      "correct_time", "amend_postmortem"]


class Command(BaseModel):
    """A request from a person or team (`jobtrail.incident-commands`, the API, the CLI)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    command_id: str = Field(min_length=1, max_length=200)
    incident_id: str = Field(min_length=1)
    command: CommandName
    actor: Actor
    time: datetime
    """When it is recorded (the caller's clock)."""
    data: dict[str, Any] = Field(default_factory=dict)
    at: datetime | None = None
    """When it happened, if not now (`--at`): kept in the payload beside the record time."""

    def payload(self) -> Payload:
        """The event this command asks for; InvalidTransition names a bad field."""
        data = dict(self.data)
        if self.at is not None:
            at = self.at if self.at.tzinfo else self.at.replace(tzinfo=UTC)
            if at > self.time:
                raise InvalidTransition(f"{self.command}: at: {at:%Y-%m-%d %H:%M:%SZ} is "
                                        "after the time it is recorded: a time to come "
                                        "cannot have happened")
            data["at"] = at
        if self.command == "assign":
            data.setdefault("why", f"assigned by {self.actor.label()}")
            data["rule"] = "manual"
        elif self.command == "add_action":
            data.setdefault("action_id", "act-" + hashlib.sha256(
                self.command_id.encode()).hexdigest()[:10])
        elif self.command == "accept_action":
            data["status"] = "open"
        elif self.command == "dismiss_action":
            data["status"] = "dismissed"
        try:
            return COMMANDS[self.command].model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise InvalidTransition(f"{self.command}: {where}: {first['msg']}") from None
