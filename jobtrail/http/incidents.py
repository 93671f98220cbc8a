"""Incident routes: list, show, and people's commands.

Reads are narrowed to the caller's projects (`jobtrail.views.incident`). Who may command a
shared incident (one whose jobs belong to several projects): anyone who can see it may add a
note or a follow-up action, tagged with their projects and shown to those projects only;
lifecycle, ownership and severity commands change what every impacted project sees, so they
need an operator token or a token holding every project the incident touches (403 otherwise,
saying so). An incident that impacted no job is an operator's alone.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from jobtrail.http.common import BACKEND, fail, query_enum, query_time, reply
from jobtrail.http.guard import principal, require
from jobtrail.identity import Principal
from jobtrail.identity.roles import command_role
from schemas.documents import load_json

TENANT_COMMANDS = frozenset({"note", "add_action", "update_action"})


def scope(request: web.Request) -> list[str] | None:
    """The token's projects, narrowed by `?project=`; None for an operator asking for all."""
    who = principal(request)
    wanted = request.query.getall("project", [])
    if who.operator:
        return wanted or None
    return [p for p in (wanted or sorted(who.projects)) if who.may_read(p)]


async def list_incidents(request: web.Request) -> web.Response:
    from processors.incidents.model import STATUSES

    backend = request.app[BACKEND]
    status = query_enum(request, "status", STATUSES)
    include = query_enum(request, "include", ("infrastructure",))
    rows = await backend.call(backend.store.incidents, scope(request), status=status,
                              since=query_time(request, "since"),
                              infrastructure=include == "infrastructure")
    return reply({"incidents": rows})


async def show_incident(request: web.Request) -> web.Response:
    backend = request.app[BACKEND]
    found = await backend.call(backend.store.incident, request.match_info["incident_id"],
                               scope(request))
    if found is None:  # unknown, or touching none of the caller's projects: same answer
        fail(web.HTTPNotFound, "no such incident")
    return reply(found)


def _authorise(who: Principal, command: str, full: dict[str, Any],
               data: dict[str, Any]) -> dict[str, Any]:
    """Refuse what the caller may not do; tag notes and actions with their projects."""
    if who.operator:
        return data
    touched = set(full["projects"])
    mine = sorted(touched & who.projects)
    if command in TENANT_COMMANDS:
        if command == "update_action":
            action = next((a for a in full["actions"] if a["action_id"] == data.get(
                "action_id")), None)
            if action is not None and not set(action.get("projects") or ()) & who.projects:
                fail(web.HTTPForbidden, "this action was added by another project or an "
                                        "operator")
        return {**data, "projects": mine}
    if not touched or not touched <= who.projects:
        others = len(touched - who.projects)
        fail(web.HTTPForbidden,
             f"the incident also impacts {others} other project(s): only an operator, or a "
             f"token holding every impacted project, may {command} it; add a note instead")
    return data


COMMAND_FIELDS = frozenset({"command", "command_id", "data", "at"})


def claimed_by(body: dict[str, Any], who: Principal) -> None:
    """Refuse a `by`: who acts is the credential's principal, never a name in the body."""
    if "by" in body:
        raise ValueError(f"by: the actor is taken from your credential ({who.describe()}), "
                         "never from the body: drop `by`")


async def incident_command(request: web.Request) -> web.Response:
    """`POST /v1/incidents/{id}/commands` `{"command": "ack", "command_id": "...", "at":
    "2026-11-30T10:05:00Z" (when it happened, optional), "data": {...}}`: 200 with the
    events it appended (embedded), 202 queued (cluster), 403 when the caller may not (its
    projects or its role), 409 with the reason when the incident's state refuses it, 422 for
    a malformed command (or a `by` naming someone else); an `at` still to come is refused
    like a bad field (409)."""
    from processors.incidents.model import Command, InvalidTransition

    who = principal(request)
    backend = request.app[BACKEND]
    incident_id = request.match_info["incident_id"]
    full = await backend.call(backend.store.incident, incident_id, None)
    if full is None or not (who.operator or set(full["projects"]) & who.projects):
        fail(web.HTTPNotFound, "no such incident")
    try:
        body = load_json(await request.read(), what="the body")
        if not isinstance(body, dict):
            raise ValueError("the body must be a JSON object")
        claimed_by(body, who)
        unknown = sorted(set(body) - COMMAND_FIELDS)
        if unknown:
            raise ValueError(f"{unknown[0]}: not a field of a command (command, command_id, "
                             "at, data)")
        if not isinstance(body.get("command_id"), str) or not 0 < len(body["command_id"]) <= 200:
            raise ValueError("command_id: a string of 1 to 200 characters is required (the "
                             "idempotency key)")
        if "at" in body and not (isinstance(body["at"], str) and body["at"]):
            raise ValueError("at: a date-time (when it happened), e.g. 2026-11-30T10:05:00Z")
        data = body.get("data", {})
        if not isinstance(data, dict):
            raise ValueError("data: must be a JSON object")
        command = Command(command_id=who.command_id(str(body.get("command_id") or "")),
                          incident_id=incident_id, command=body.get("command"),
                          actor=who.actor(), time=datetime.now(UTC), data=data,
                          at=body.get("at"))
    except (ValueError, RecursionError) as exc:
        detail = exc.errors()[0] if isinstance(exc, ValidationError) else {"msg": str(exc)}
        where = ".".join(str(x) for x in detail.get("loc", ()))
        fail(web.HTTPUnprocessableEntity, f"{where}: {detail['msg']}" if where
             else str(detail["msg"]))
    require(request, command_role(command.command, command.data), command.command)
    command = command.model_copy(update={"data": _authorise(who, command.command, full,
                                                            command.data)})
    try:
        events = await backend.command(command)
    except InvalidTransition as exc:
        fail(web.HTTPConflict, str(exc))
    if events is None:
        return reply({"queued": command.command_id}, status=202)
    return reply({"events": [e.model_dump(mode="json") for e in events]})
