"""A postmortem's state, folded from the incident's own log (its `postmortem_*` and
`learning_recorded` events), and the rules its events must follow.

Status: (none) -> draft -> in_review -> approved -> published, `changes_requested` back to
draft, an edit or a re-draft after approval back to draft (the approval was of other text),
`waived` with a reason instead of a postmortem. Sections are the machine's (`auto`, refreshed
by every re-draft) or people's (`human`: never overwritten, marked `stale` when a re-draft's
facts under it differ from those it was written against).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime

from schemas import incident_events as ev

AUTO_SECTIONS = ("summary", "header", "participants", "impact", "timings", "detection",
                 "timeline", "trigger", "resolution", "prior", "followups", "learnings")
HUMAN_SECTIONS = ("contributing", "mitigators", "went_well", "went_badly", "lucky")
SECTIONS = ("summary", "header", "participants", "impact", "timings", "detection", "timeline",
            "trigger", "resolution", "contributing", "mitigators", "prior", "went_well",
            "went_badly", "lucky", "followups", "learnings")
TITLES = {
    "summary": "Summary", "header": "Incident", "participants": "Participants",
    "impact": "Impact", "timings": "Response times", "detection": "Detection",
    "resolution": "Resolution",
    "timeline": "Timeline", "trigger": "Trigger", "contributing": "Contributing factors",
    "mitigators": "Mitigators", "prior": "Prior incidents on the same entity",
    "went_well": "What went well", "went_badly": "What went badly",
    "lucky": "Where we got lucky", "followups": "Follow-ups",
    "learnings": "What the cluster learns",
}
PROMPTS = {
    "contributing": "What made it worse or likelier: conditions, not people.",
    "mitigators": "What limited the damage, and the steps that worked.",
    "went_well": "What worked in detection, response and recovery.",
    "went_badly": "What slowed detection, response or recovery.",
    "lucky": "What could have gone worse and did not.",
}
REQUIRED = ("contributing",)
"""The human sections a reviewer cannot approve while they still hold their prompt."""
LEARNINGS = ("sample", "monitor", "runbook")
STATUSES = ("draft", "in_review", "approved", "published", "waived")


class PostmortemRefused(ValueError):
    """A postmortem request its current state does not allow (the message says why)."""


@dataclass(frozen=True)
class Section:
    name: str
    text: str
    provenance: str = "auto"  # auto, human, prompt (a human section nobody wrote yet)
    drafted_from: int = 0  # the incident log position the auto text was computed at
    auto_text: str = ""  # the machine's text when people took the section over
    edited_by: str = ""
    stale: bool = False


@dataclass(frozen=True)
class Learning:
    learning: str
    path: str = ""
    digest: str = ""
    check: str = ""
    reason: str = ""
    by: str = ""
    at: datetime | None = None


@dataclass
class Postmortem:
    status: str = ""
    sections: dict[str, Section] = field(default_factory=dict)
    owner: str = ""
    due: str = ""
    template: str = ""
    position: int = 0
    drafted_at: datetime | None = None
    authors: set[str] = field(default_factory=set)
    reviewers: tuple[str, ...] = ()
    approved_by: str = ""
    approved_at: datetime | None = None
    published_at: datetime | None = None
    digest: str = ""
    waived: str = ""
    reviews: list[tuple[str, str, str, datetime]] = field(default_factory=list)
    """The review loop in order: (kind, by, comment, at); kind is review_requested (the
    comment names the reviewers), changes_requested or approved."""
    learnings: dict[str, Learning] = field(default_factory=dict)
    revisions: list[tuple[int, str, datetime, str, str]] = field(default_factory=list)
    """Amendments after publication: (revision, by, at, section, why)."""

    @property
    def stale(self) -> list[str]:
        return [s.name for s in self.sections.values() if s.stale]


def _drafted(pm: Postmortem, p: ev.PostmortemDrafted, by: str, time: datetime) -> None:
    for name, text in p.sections.items():
        old = pm.sections.get(name)
        if old is not None and old.provenance == "human":
            pm.sections[name] = replace(old, stale=old.stale or text != old.auto_text)
        else:
            pm.sections[name] = Section(name, text, "auto", p.position)
    for name in HUMAN_SECTIONS:
        pm.sections.setdefault(name, Section(name, PROMPTS[name], "prompt", p.position))
    for name, text in (getattr(p, "human", None) or {}).items():  # upcast v1 free text
        pm.sections[name] = Section(name, text, "human", p.position, edited_by=by)
    pm.position, pm.template, pm.drafted_at = p.position, p.template, time
    pm.owner = p.owner or pm.owner or by
    pm.due = p.due or pm.due
    pm.authors.add(by)
    if pm.status in ("", "approved"):
        pm.status, pm.approved_by, pm.approved_at = "draft", "", None


def fold(pm: Postmortem, payload: ev.Payload, by: str, time: datetime) -> None:
    """Fold one postmortem event (never fails: stored history always folds)."""
    if isinstance(payload, ev.PostmortemDrafted):
        _drafted(pm, payload, by, time)
    elif isinstance(payload, ev.PostmortemSectionEdited):
        old = pm.sections.get(payload.section) or Section(payload.section, "")
        auto = old.text if old.provenance == "auto" else old.auto_text
        pm.sections[payload.section] = Section(payload.section, payload.text, "human",
                                               old.drafted_from, auto, by)
        pm.authors.add(by)
        if pm.status == "approved":
            pm.status, pm.approved_by, pm.approved_at = "draft", "", None
    elif isinstance(payload, ev.PostmortemReviewRequested):
        pm.status, pm.reviewers = "in_review", tuple(payload.reviewers)
        pm.reviews.append(("review_requested", by, ", ".join(payload.reviewers), time))
    elif isinstance(payload, ev.PostmortemChangesRequested):
        pm.status = "draft"
        pm.reviews.append(("changes_requested", by, payload.comment, time))
    elif isinstance(payload, ev.PostmortemApproved):
        pm.status, pm.approved_by, pm.approved_at = "approved", by, time
        pm.reviews.append(("approved", by, payload.comment, time))
    elif isinstance(payload, ev.PostmortemPublished):
        for name, text in (getattr(payload, "human", None) or {}).items():  # v1
            pm.sections[name] = Section(name, text, "human", edited_by=by)
        pm.status, pm.published_at, pm.digest = "published", time, payload.digest
    elif isinstance(payload, ev.PostmortemAmended):
        old = pm.sections.get(payload.section) or Section(payload.section, "")
        auto = old.text if old.provenance == "auto" else old.auto_text
        pm.sections[payload.section] = Section(payload.section, payload.text, "human",
                                               old.drafted_from, auto, by)
        pm.revisions.append((len(pm.revisions) + 2, by, time, payload.section, payload.why))
    elif isinstance(payload, ev.PostmortemWaived):
        pm.status, pm.waived = "waived", payload.reason
    elif isinstance(payload, ev.LearningRecorded):
        pm.learnings[payload.learning] = Learning(payload.learning, payload.path,
                                                  payload.digest, payload.check,
                                                  payload.reason, by, time)


_ALLOWED = {
    "postmortem_drafted": ("", "draft", "in_review", "approved"),
    "postmortem_section_edited": ("draft", "in_review", "approved"),
    "postmortem_review_requested": ("draft",),
    "postmortem_changes_requested": ("in_review",),
    "postmortem_approved": ("in_review",),
    "postmortem_published": ("approved",),
    "postmortem_waived": ("", "draft", "in_review"),
    "postmortem_amended": ("published",),
}
_VERB = {"postmortem_drafted": "draft", "postmortem_section_edited": "edit",
         "postmortem_review_requested": "review", "postmortem_changes_requested":
         "request-changes", "postmortem_approved": "approve", "postmortem_published": "publish",
         "postmortem_waived": "waive", "postmortem_amended": "amend"}


def check(pm: Postmortem, payload: ev.Payload, by: str, severity: str) -> None:
    """Raise PostmortemRefused when the request is not allowed now."""
    allowed = _ALLOWED.get(payload.KIND)
    if allowed is not None and pm.status not in allowed:
        now = pm.status or "not drafted"
        verb = _VERB[payload.KIND]
        when = " or ".join(s or "not drafted" for s in allowed)
        raise PostmortemRefused(f"postmortem is {now}: {verb} is allowed when {when}")
    if isinstance(payload, ev.PostmortemSectionEdited) and payload.section not in SECTIONS:
        raise PostmortemRefused(f"section must be one of {', '.join(SECTIONS)}")
    if isinstance(payload, ev.PostmortemSectionEdited) and not payload.text.strip():
        raise PostmortemRefused(f"text: the {payload.section} section's Markdown is empty")
    if isinstance(payload, ev.PostmortemAmended):
        if payload.section not in SECTIONS:
            raise PostmortemRefused(f"section must be one of {', '.join(SECTIONS)}")
        if not payload.text.strip():
            raise PostmortemRefused(f"text: the {payload.section} section's Markdown is empty")
        if not payload.why.strip():
            raise PostmortemRefused("why: an amendment to a published postmortem says why")
    if isinstance(payload, ev.PostmortemApproved) and by in pm.authors:
        raise PostmortemRefused(f"{by} wrote part of this postmortem: the approver must not be "
                                f"an author ({', '.join(sorted(pm.authors))})")
    if isinstance(payload, ev.PostmortemApproved):
        unwritten = [TITLES[n] for n in REQUIRED
                     if (s := pm.sections.get(n)) is None or s.provenance == "prompt"]
        if unwritten:
            raise PostmortemRefused(f"still to write before approval: {', '.join(unwritten)} "
                                    "(jobtrail postmortem edit)")
    if isinstance(payload, ev.LearningRecorded):
        if payload.learning not in LEARNINGS:
            raise PostmortemRefused(f"learning must be one of {', '.join(LEARNINGS)}")
        if not (payload.path or payload.reason):
            raise PostmortemRefused("a learning needs a path (with its check) or a reason")
    if isinstance(payload, ev.PostmortemPublished) and severity in ("sev1", "sev2"):
        missing = [k for k in LEARNINGS if k not in pm.learnings]
        if missing:
            raise PostmortemRefused(
                f"a {severity} postmortem needs a failure sample, a monitor and a runbook entry "
                f"(or the reason for not making one): missing {', '.join(missing)} "
                f"(jobtrail postmortem sample|monitor|runbook, or learning --reason)")
