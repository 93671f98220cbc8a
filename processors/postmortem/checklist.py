"""The commander's checklist, computed from the incident, and the due dates.

Required items block `close` (unless it is forced with a reason: a recorded waiver). What is
required depends on severity: every incident must be acknowledged and its follow-ups owned;
sev1 and sev2 also need a commander, an owner a person confirmed, mitigation, verified
recovery of the attempts that failed and a published (or waived) postmortem, due 3 days
(sev1) or 5 business days (sev2) after the incident was resolved (opened, until then).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from processors.incidents.aggregate import Incident

MAJOR = ("sev1", "sev2")
FOLLOWUP_DAYS = {"sev1": 14, "sev2": 30, "sev3": 60, "sev4": 90}
"""A follow-up's default due date, in days from when it was accepted or added."""
CLOSED_ACTIONS = frozenset({"done", "not_doing", "dismissed"})


@dataclass(frozen=True)
class Item:
    name: str
    label: str
    state: str  # done, open, overdue, n/a
    detail: str = ""
    required: bool = True

    @property
    def blocking(self) -> bool:
        return self.required and self.state in ("open", "overdue")


def _business_days(start: date, days: int) -> date:
    current = start
    while days > 0:
        current += timedelta(days=1)
        if current.weekday() < 5:
            days -= 1
    return current


def postmortem_due(inc: Incident) -> str:
    """The postmortem's due date (ISO), '' when the severity needs none."""
    base = inc.resolved_at or inc.opened_at
    if base is None or inc.severity not in MAJOR:
        return ""
    day = base.date()
    return (day + timedelta(days=3) if inc.severity == "sev1"
            else _business_days(day, 5)).isoformat()


def followup_due(severity: str, at: datetime) -> str:
    return (at.date() + timedelta(days=FOLLOWUP_DAYS.get(severity, 90))).isoformat()


def checklist(inc: Incident, today: date | None = None) -> list[Item]:
    major = inc.severity in MAJOR
    pm = inc.pm
    waived = pm.status == "waived"
    failed = [j for j in inc.jobs.values() if j.role == "failed"]

    def item(name: str, label: str, done: bool, detail: str = "",
             required: bool = True) -> Item:
        return Item(name, label, "done" if done else "open", detail, required)

    due = postmortem_due(inc) or pm.due
    late = bool(today and due and today.isoformat() > due and pm.status not in (
        "published", "waived"))
    unowned = sorted(a.action_id for a in inc.actions.values()
                     if a.status not in CLOSED_ACTIONS and (not a.owner or not a.due))
    untriaged = sorted(a.action_id for a in inc.actions.values() if a.status == "proposed")
    pm_detail = f"waived: {pm.waived}" if waived else ""
    items = [
        item("acknowledged", "Acknowledged", inc.acknowledged_at is not None
             or inc.resolved_at is not None,
             "" if inc.acknowledged_at or not inc.resolved_at else "by its resolution"),
        item("commander", "Commander named", bool(inc.commander), inc.commander,
             required=major),
        item("owner_confirmed", "Owner confirmed by a person", inc.owner_rule == "manual",
             f"{inc.owner} (rule {inc.owner_rule or 'none'})", required=major),
        item("mitigated", "Mitigated", inc.mitigated_at is not None
             or inc.resolved_at is not None, required=major),
        Item("recovery_verified", "Recovery verified", "n/a" if not failed else (
            "done" if all(j.verified_at for j in failed) else "open"),
            inc.recovery, required=major),
        Item("postmortem_due", "Postmortem due", "n/a" if not due else (
            "done" if pm.status in ("published", "waived") else
            "overdue" if late else "open"), due, required=False),
        item("drafted", "Postmortem drafted", bool(pm.status) or waived, pm_detail,
             required=major),
        item("reviewed", "Postmortem reviewed", pm.status in ("approved", "published")
             or waived, pm.approved_by or pm_detail, required=major),
        item("published", "Postmortem published", pm.status == "published" or waived,
             pm_detail, required=major),
        item("followups_owned", "Follow-ups owned, dated and triaged",
             not unowned and not untriaged,
             "; ".join(filter(None, [f"without owner or due: {', '.join(unowned)}"
                                     if unowned else "",
                                     f"proposed, not triaged: {', '.join(untriaged)}"
                                     if untriaged else ""]))),
    ]
    return items


def blocking(inc: Incident) -> list[str]:
    return [i.name for i in checklist(inc) if i.blocking]
