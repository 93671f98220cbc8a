"""What a follow-up action's fields may hold (checked when people add or change one):
a YYYY-MM-DD due date, a kind, a priority, an http(s) tracker URL."""

from __future__ import annotations

from datetime import date

from schemas import incident_events as ev

ACTION_KINDS = ("prevent", "mitigate", "detect", "process")
ACTION_PRIORITIES = ("p0", "p1", "p2", "p3")


def field_problem(payload: ev.ActionAdded | ev.ActionUpdated) -> str | None:
    """The first field the action gets wrong, said for the person who sent it; else None."""
    if payload.due:
        try:
            date.fromisoformat(payload.due)
        except ValueError:
            return f"due: {payload.due!r} is not a date (YYYY-MM-DD)"
        if len(payload.due) != 10:
            return f"due: {payload.due!r} is not a date (YYYY-MM-DD)"
    if payload.kind and payload.kind not in ACTION_KINDS:
        return f"kind must be one of {', '.join(ACTION_KINDS)}"
    if payload.priority and payload.priority not in ACTION_PRIORITIES:
        return f"priority must be one of {', '.join(ACTION_PRIORITIES)}"
    if payload.tracker and not payload.tracker.startswith(("https://", "http://")):
        return "tracker: the ticket's http(s) URL"
    return None
