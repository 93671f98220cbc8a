"""Responsibility: who owns an incident, and the rule and reason that say so.

Entity overrides (`routing.rules`, first match) come before the class's own team; a class
owned by the job (`team: job`) goes to the project's team. A person's reassignment (rule
`manual`) is never routed back.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from schemas import incident_events as ev

if TYPE_CHECKING:
    from processors.incidents.context import Context


def owner(ctx: Context, klass: str, entity: str, project: str,
          team: str = "") -> tuple[str, str, str]:
    """(team, rule, why) for an incident of `klass` on `entity`; `team` is the cause's own
    owner when it names one (a change's), after the entity overrides."""
    routing = ctx.rules.routing
    match = next((r for r in routing.rules if r.matches(klass, entity)), None)
    if match is not None:
        return match.team, match.name, match.why or f"{klass} matches routing rule {match.name}"
    if team:
        return team, "cause-owner", f"{entity} names its owner: {team}"
    entry = ctx.rules.klass(klass)
    if entry.team == "job":
        team = routing.team_of_project.get(project, f"project:{project}")
        return team, "job-owner", f"{klass} is the job's own: routed to {project}'s team"
    return entry.team, klass, entry.why or f"{klass} belongs to {entry.team}"


def route(ctx: Context, inc_id: str, time: datetime, rule: str, project: str = "",
          team: str = "") -> None:
    inc = ctx.book.incidents[inc_id]
    if inc.owner_rule == "manual":
        return  # a person assigned it; the processor does not take it back
    project = project or (inc.projects[0] if inc.projects else inc.entity.split("/")[0])
    team, route_name, why = owner(ctx, inc.klass, inc.entity, project, team)
    if team != inc.owner:
        ctx.book.emit(inc_id, ev.OwnerAssigned(team=team, rule=route_name, why=why), time, rule,
                      f"owner:{team}:{inc.klass}")
