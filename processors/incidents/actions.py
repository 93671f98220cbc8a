"""Proposed follow-ups: what known remediation says to do about an incident's cause.

Each failure class lists its actions in the rules (`classes.<name>.actions`): a title (with
`{entity}`, `{node}`, `{gpu}`, `{job}` and the cause event's attributes filled in), the team
that should do it (default: the incident's owner), why, its kind, and conditions on the cause
event (an Xid number). Proposals are events (`action_proposed`, status `proposed`); people
accept, edit or dismiss them (`accept_action`, `update_action`, `dismiss_action` with a
reason), which the log records like any command. A proposal's id is derived, so it is made
once per incident and remediation rule, however often the cause is restated.
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from datetime import datetime
from typing import TYPE_CHECKING, Any

from processors.incidents.book import node_of
from processors.timeline import change_nodes, event_filesystem
from schemas import incident_events as ev
from schemas.events import Event

if TYPE_CHECKING:
    from processors.incidents.context import Context

_GPU = re.compile(r"/gpu(\d+)$")


def _fields(ctx: Context, inc_id: str, cause: Event | None) -> dict[str, Any]:
    inc = ctx.book.incidents[inc_id]
    attrs = dict(cause.attributes) if cause else {}
    entity = inc.entity
    gpu = attrs.get("gpu")
    if gpu in (None, "") and (match := _GPU.search(cause.entity or "" if cause else entity)):
        gpu = match.group(1)
    fields: dict[str, Any] = {k: v for k, v in attrs.items() if isinstance(v, str | int | float)}
    filesystem = event_filesystem(cause, ctx.topology()) if cause else ""
    nodes = change_nodes(cause) if cause else []
    fields["nodes"] = ", ".join(nodes[:8]) + (f" and {len(nodes) - 8} more" if len(nodes) > 8
                                              else "") if nodes else node_of(entity)
    fields.update(entity=entity, node=(cause.node if cause else "") or node_of(entity),
                  gpu=gpu if gpu not in (None, "") else "?",
                  job=next(iter(sorted(inc.jobs)), "the job"),
                  filesystem=filesystem or entity, owner=inc.owner)
    return fields


def for_consequence(ctx: Context, inc_id: str, time: datetime, event: Event, klass: str,
                    rule: str) -> None:
    """A consequence owned by another team than the incident's (a drained node, a GPU off
    the bus inside the network team's incident): its own class's follow-ups, proposed for
    that team, once per incident, remediation and node."""
    from processors.incidents import routing

    inc = ctx.book.incidents[inc_id]
    entry = ctx.rules.classes.get(klass)
    entity = event.entity or event.node or ""
    if entry is None or not entry.actions or entry.team == "job" or inc.job_scoped:
        return  # a job's own incident is provisional: late evidence makes the drain its cause
    team, _, _ = routing.owner(ctx, klass, entity, "")
    if not team or team == inc.owner:
        return
    attrs = dict(event.attributes)
    gpu = attrs.get("gpu")
    if gpu in (None, "") and (match := _GPU.search(entity)):
        gpu = match.group(1)
    node = event.node or node_of(entity)
    fields: dict[str, Any] = {k: v for k, v in attrs.items() if isinstance(v, str | int | float)}
    fields.update(entity=entity, node=node, nodes=node, gpu=gpu if gpu not in (None, "") else "?",
                  job=next(iter(sorted(inc.jobs)), "the job"), owner=team,
                  filesystem=event_filesystem(event, ctx.topology()) or entity)
    for action in entry.actions:
        if action.when and not all(m.test(attrs, event.message) for m in action.when):
            continue
        action_id = "prop-" + hashlib.sha256(
            f"{inc_id}\0{action.name}\0{node or entity}".encode()).hexdigest()[:10]
        if action_id in inc.actions:
            continue
        why = action.why.format_map(defaultdict(lambda: "?", fields))
        ctx.book.emit(inc_id, ev.ActionProposed(
            action_id=action_id, title=action.title.format_map(defaultdict(lambda: "?", fields)),
            owner=action.team or team, rule=action.name, kind=action.kind,
            why=f"{why} ({event.type} on {entity}, a consequence inside {inc.owner}'s "
                "incident, is {team}'s)".replace("{team}", team)),
            time, rule, f"propose:{action.name}:{node or entity}")


def propose(ctx: Context, inc_id: str, time: datetime, cause: Event | None, rule: str) -> None:
    inc = ctx.book.incidents[inc_id]
    entry = ctx.rules.classes.get(inc.klass)
    if entry is None or not entry.actions:
        return
    fields = _fields(ctx, inc_id, cause)
    message = cause.message if cause else ""
    attrs = cause.attributes if cause else {}
    for action in entry.actions:
        if action.when and (cause is None or not all(m.test(attrs, message)
                                                     for m in action.when)):
            continue
        title = action.title.format_map(defaultdict(lambda: "?", fields))
        why = action.why.format_map(defaultdict(lambda: "?", fields))
        action_id = "prop-" + hashlib.sha256(
            f"{inc_id}\0{action.name}".encode()).hexdigest()[:10]
        if action_id in inc.actions:
            continue
        ctx.book.emit(inc_id, ev.ActionProposed(action_id=action_id, title=title,
                                                owner=action.team or inc.owner, why=why,
                                                rule=action.name, kind=action.kind),
                      time, rule, f"propose:{action.name}")
