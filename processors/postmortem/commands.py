"""People's postmortem and follow-up commands that need the incident to decide: a draft is
computed from the incident as it stands, a publication records the digest of what was
published, a follow-up without a due date gets one from the severity."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from processors.postmortem import draft
from processors.postmortem.checklist import followup_due, postmortem_due
from schemas import incident_events as ev
from schemas.incident_events import Payload

if TYPE_CHECKING:
    from processors.incidents.model import Command, Incident


def decide(command: Command, state: Incident | None,
           incidents: Mapping[str, Incident]) -> Payload:
    payload = command.payload()
    if state is None:
        return payload
    if command.command == "draft_postmortem":
        owner = str(command.data.get("owner") or state.pm.owner or command.actor.name)
        return ev.PostmortemDrafted(sections=draft.sections(state, incidents, owner),
                                    position=state.seq, template=draft.TEMPLATE_DIGEST,
                                    owner=owner, due=postmortem_due(state))
    if command.command == "publish_postmortem":
        return ev.PostmortemPublished(digest=draft.digest(state))
    if command.command == "add_action" and isinstance(payload, ev.ActionAdded) \
            and not payload.due:
        return ev.ActionAdded.model_validate(
            {**payload.data(), "due": followup_due(state.severity, command.time)})
    if command.command == "accept_action" and isinstance(payload, ev.ActionUpdated):
        action = state.actions.get(payload.action_id)
        if action is not None and not action.due and not payload.due:
            return ev.ActionUpdated.model_validate(
                {**payload.data(), "due": followup_due(state.severity, command.time)})
    return payload
