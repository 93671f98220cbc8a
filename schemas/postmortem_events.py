"""The incident events of the follow-through: postmortem drafting and review, learnings and
follow-up actions (payloads re-exported by `schemas.incident_events`, with their upcasters)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from schemas.incident_payload import Payload


class PostmortemDrafted(Payload):
    """The machine's sections of a postmortem, computed from the incident at log position
    `position` with the template `template` (a digest). Folding it refreshes the auto
    sections; a section people edited keeps their text and is marked stale when the facts
    under it changed (docs/postmortems.md)."""

    KIND = "postmortem_drafted"
    VERSION = 2
    schema_version: int = 2
    sections: dict[str, str] = Field(default_factory=dict)
    position: int = 0
    template: str = ""
    owner: str = ""
    due: str = ""


def _drafted_v1(data: dict[str, Any]) -> dict[str, Any]:
    """v1 carried one free text: it becomes the summary, written by a person."""
    text = data.get("text") or ""
    return {"sections": {}, "human": {"summary": text} if text else {}}


class PostmortemSectionEdited(Payload):
    KIND = "postmortem_section_edited"
    section: str
    text: str = ""


class PostmortemReviewRequested(Payload):
    KIND = "postmortem_review_requested"
    reviewers: list[str] = Field(default_factory=list)


class PostmortemChangesRequested(Payload):
    KIND = "postmortem_changes_requested"
    comment: str = ""


class PostmortemApproved(Payload):
    KIND = "postmortem_approved"
    comment: str = ""


class PostmortemPublished(Payload):
    """Published: `digest` is the sha256 of the Markdown as published (v1: a free text)."""

    KIND = "postmortem_published"
    VERSION = 2
    schema_version: int = 2
    digest: str = ""


def _published_v1(data: dict[str, Any]) -> dict[str, Any]:
    text = data.get("text") or ""
    return {"human": {"summary": text} if text else {}}


class PostmortemAmended(Payload):
    """A published postmortem changed: one section's new text, and why (a revision)."""

    KIND = "postmortem_amended"
    section: str
    text: str = ""
    why: str = ""


class PostmortemWaived(Payload):
    KIND = "postmortem_waived"
    reason: str = Field(min_length=1)


class LearningRecorded(Payload):
    """What the cluster learned: a failure sample (a replayable scenario file), a monitor (a
    rules change checked by replaying the sample) or a runbook entry, with the check that
    was run; or the reason none will be made."""

    KIND = "learning_recorded"
    learning: str  # sample, monitor, runbook
    path: str = ""
    digest: str = ""
    check: str = ""
    reason: str = ""


class ActionAdded(Payload):
    KIND = "action_added"
    action_id: str
    title: str = ""
    owner: str = ""
    due: str = ""
    kind: str = ""  # prevent, mitigate, detect, process
    priority: str = ""
    tracker: str = ""
    projects: list[str] = Field(default_factory=list)


class ActionProposed(Payload):
    """A follow-up the processors propose from known remediation (the Xid catalogue, link
    flaps, a filling filesystem, a crash-looping node); people accept, edit or dismiss it."""

    KIND = "action_proposed"
    action_id: str
    title: str
    owner: str = ""
    why: str = ""
    rule: str = ""
    kind: str = "mitigate"


class ActionUpdated(Payload):
    KIND = "action_updated"
    action_id: str
    title: str | None = None
    owner: str | None = None
    status: str | None = None  # open (accepted), done, not_doing, dismissed
    due: str | None = None
    reason: str | None = None
    priority: str | None = None
    tracker: str | None = None
    kind: str | None = None
