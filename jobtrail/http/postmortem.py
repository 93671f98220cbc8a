"""Postmortem routes: read and export, the review verbs, follow-ups, and the review page.

A postmortem is read folded from its incident's log. Who may read it: an operator, or a token
holding every project the incident touches (a postmortem tells the whole story, so a tenant
of one project of a shared incident is refused with 403 saying so); an incident touching
none of the caller's projects is 404, like every read. The verbs are incident commands with
the lifecycle policy (`incidents._authorise`).

The page (`/incidents/{id}/postmortem`) authenticates like the API (`jobtrail.http.guard`:
a bearer token, the auth proxy's header, or the session cookie of a sign-in); a browser not
signed in is redirected to `/auth/login`. Its buttons send the page's anti-CSRF token, which
every cookie- or proxy-authenticated change needs. Who acts is the signed-in principal; the
role each verb needs is in `jobtrail.identity.roles`.
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from jobtrail.http.common import (
    BACKEND,
    SESSION,
    SETTINGS,
    fail,
    query_enum,
    reply,
)
from jobtrail.http.guard import csrf_token, principal, require
from jobtrail.http.incidents import _authorise, claimed_by, scope
from jobtrail.identity.roles import POSTMORTEM_VERBS, command_role
from processors.postmortem.state import SECTIONS
from schemas.documents import load_json, load_yaml

VERBS = POSTMORTEM_VERBS
FIELDS = {"amend_postmortem": ("section", "text", "why"), "draft_postmortem": ("owner",),
          "edit_postmortem": ("section", "text"),
          "request_review": ("reviewers",), "request_changes": ("comment",),
          "approve_postmortem": ("comment",), "publish_postmortem": (),
          "waive_postmortem": ("reason",), "record_learning": ("learning", "reason")}
"""What each verb reads from the body. `learning` declines one with a reason; `sample`,
`monitor` (body `rules`: the YAML of the rules change) and `runbook` make the artefact under
HOME/learnings/, check it, and record it, like `jobtrail postmortem sample|monitor|runbook`."""
TYPES = {"reviewers": "a list of strings", "learning": "one of sample, monitor, runbook",
         "section": "one of " + ", ".join(SECTIONS)}
MADE = ("sample", "monitor", "runbook")


def _typed(key: str, value: Any) -> bool:
    if key == "reviewers":
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if key == "learning":
        return value in ("sample", "monitor", "runbook")
    if key == "section":
        return value in SECTIONS
    return isinstance(value, str)


REQUIRED = {"edit": ("section", "text"), "amend": ("section", "text", "why"),
            "request-changes": ("comment",), "waive": ("reason",), "learning": ("learning",),
            "monitor": ("rules",)}


class NeedsSample(ValueError):
    """A monitor asked for before the failure sample it is checked against (409)."""


def _make(settings: Any, store: Any, incident_id: str, verb: str,
          body: dict[str, Any]) -> dict[str, str]:
    """Make and check one learning artefact (in a worker thread); LearningFailed says why."""
    from pathlib import Path

    from jobtrail.learn import lessons as learn
    from jobtrail.views.postmortem import state

    inc = state(store.incident_log(incident_id))
    if inc is None:
        raise learn.LearningFailed("no such incident")
    base = settings.home / "learnings"
    if verb == "sample":
        spec = load_yaml(settings.topology_file.read_text(), what=str(settings.topology_file)) \
            if settings.topology_file else None
        done = learn.write_sample(store, inc, base / "samples" / f"sample-{incident_id}.yaml",
                                  spec)
    elif verb == "monitor":
        rules = body.get("rules")
        if not isinstance(rules, str) or not rules.strip():
            raise learn.LearningFailed("rules: the YAML of the proposed rules change")
        recorded = inc.pm.learnings.get("sample")
        if recorded is None or not recorded.path or not Path(recorded.path).exists():
            raise NeedsSample("no failure sample recorded: make one first "
                                       "(POST .../postmortem/sample)")
        name = hashlib.sha256(rules.encode()).hexdigest()[:12]
        done = learn.write_monitor(Path(recorded.path), rules,
                                   base / "monitors" / f"monitor-{incident_id}-{name}.yaml")
    else:
        done = learn.write_runbook(inc, base / "runbooks")
    return learn.learning_data(verb, done)


async def _incident(request: web.Request) -> Any:
    """The folded incident, after the read policy."""
    from jobtrail.views.incident import SHARED_POSTMORTEM, postmortem_access
    from jobtrail.views.postmortem import state

    backend = request.app[BACKEND]
    incident_id = request.match_info["incident_id"]
    who = principal(request)
    full = await backend.call(backend.store.incident, incident_id, None)
    access = "unknown" if full is None else postmortem_access(full["projects"], who.scope)
    if access == "unknown":
        fail(web.HTTPNotFound, "no such incident")
    if access == "shared":
        fail(web.HTTPForbidden, SHARED_POSTMORTEM)
    return await backend.call(lambda: state(backend.store.incident_log(incident_id)))


async def read(request: web.Request) -> web.StreamResponse:
    """`GET /v1/incidents/{id}/postmortem?format=json|md|html`."""
    from jobtrail.views.postmortem import CSP, document, export

    inc = await _incident(request)
    fmt = request.query.get("format", "json")
    today = datetime.now(UTC).date()
    if fmt == "json":
        return reply(document(inc, today))
    if fmt not in ("md", "html"):
        fail(web.HTTPBadRequest, "format must be json, md or html")
    kind = "text/markdown" if fmt == "md" else "text/html"
    headers = {"Content-Security-Policy": CSP} if fmt == "html" else {}
    return web.Response(text=export(inc, fmt, today, _links(request)), content_type=kind,
                        charset="utf-8",
                        headers=headers)


async def command(request: web.Request) -> web.Response:
    """`POST /v1/incidents/{id}/postmortem/{verb}` `{"by": ..., "command_id": ..., ...}`:
    200 with the postmortem after it (embedded), 202 queued (cluster), 403, 409 with the
    reason the state refuses it, 422 for a malformed body."""
    from jobtrail.views.postmortem import document, state
    from processors.incidents.model import Command, InvalidTransition

    verb = request.path.rsplit("/", 1)[-1]  # one route per verb (each its own body)
    if verb not in VERBS:
        fail(web.HTTPNotFound, f"no postmortem verb {verb!r} (one of {', '.join(VERBS)})")
    who = principal(request)
    backend = request.app[BACKEND]
    incident_id = request.match_info["incident_id"]
    full = await backend.call(backend.store.incident, incident_id, None)
    if full is None or not (who.operator or set(full["projects"]) & who.projects):
        fail(web.HTTPNotFound, "no such incident")
    name = VERBS[verb]
    try:
        body = load_json(await request.read() or b"{}", what="the body")
        if not isinstance(body, dict):
            raise ValueError("the body must be a JSON object")
        claimed_by(body, who)
        unknown = sorted(set(body) - set(FIELDS[name]) - {"command_id"} - (
            {"rules"} if verb == "monitor" else set()))
        if unknown:
            raise ValueError(f"{unknown[0]}: not a field of {verb} (it takes "
                             f"{', '.join(('command_id', *FIELDS[name]))})")
        if "command_id" in body and not (isinstance(body["command_id"], str)
                                         and 0 < len(body["command_id"]) <= 200):
            raise ValueError("command_id: a string of 1 to 200 characters")
        for key in FIELDS[name] + (("rules",) if verb == "monitor" else ()):
            if key in body and not _typed(key, body[key]):
                raise ValueError(f"{key}: must be {TYPES.get(key, 'a string')}")
        data = {k: body[k] for k in FIELDS[name] if k in body}
        for required in REQUIRED.get(verb, ()):
            if not isinstance(body.get(required), str) or not body[required].strip():
                raise ValueError(f"{required}: required ({verb} needs "
                                 f"{' and '.join(REQUIRED[verb])})")
        if verb == "learning" and not data.get("reason"):
            raise ValueError("reason: a declined learning needs a reason (make one with "
                             "POST .../postmortem/sample, monitor or runbook)")
        cmd = Command(command_id=who.command_id(str(body.get("command_id")
                                                     or f"http-{uuid.uuid4().hex}")),
                      incident_id=incident_id, command=name, actor=who.actor(),
                      time=datetime.now(UTC), data=data)
    except (ValueError, RecursionError) as exc:
        errors = getattr(exc, "errors", None)
        detail = errors()[0] if callable(errors) else {"msg": str(exc)}
        where = ".".join(str(x) for x in detail.get("loc", ()))
        fail(web.HTTPUnprocessableEntity, f"{where}: {detail['msg']}" if where
             else str(detail["msg"]))
    require(request, command_role(name, cmd.data), f"postmortem {verb}")
    cmd = cmd.model_copy(update={"data": _authorise(who, name, full, cmd.data)})
    if verb in MADE:
        from jobtrail.learn.lessons import LearningFailed

        try:
            made = await backend.call(_make, request.app[SETTINGS], backend.store, incident_id,
                                      verb, body)
        except NeedsSample as exc:
            fail(web.HTTPConflict, str(exc))
        except LearningFailed as exc:
            fail(web.HTTPUnprocessableEntity, str(exc))
        cmd = cmd.model_copy(update={"data": made})
    try:
        events = await backend.command(cmd)
    except InvalidTransition as exc:
        fail(web.HTTPConflict, str(exc))
    if events is None:
        return reply({"queued": cmd.command_id}, status=202)
    inc = await backend.call(lambda: state(backend.store.incident_log(incident_id)))
    return reply({"events": [e.model_dump(mode="json") for e in events],
                  **document(inc, datetime.now(UTC).date())})


async def followups(request: web.Request) -> web.Response:
    """`GET /v1/followups?team=&overdue=true&status=`: follow-ups across incidents, bound
    to the caller's projects."""
    backend = request.app[BACKEND]
    overdue = query_enum(request, "overdue", ("true", "false", "1", "0")) in ("1", "true")
    rows = await backend.call(backend.store.followups, scope(request),
                              team=request.query.get("team", ""),
                              status=request.query.get("status", ""),
                              overdue_on=datetime.now(UTC).date().isoformat() if overdue
                              else "")
    return reply({"followups": rows})


# --- the page -------------------------------------------------------------------------------


async def page(request: web.Request) -> web.Response:
    """The review page; a browser not signed in is sent to sign in (not shown JSON)."""
    from jobtrail.http.login import login_url
    from jobtrail.views.postmortem import CSP
    from jobtrail.views.review import page as render

    try:
        who = principal(request)
    except web.HTTPUnauthorized:
        raise web.HTTPFound(login_url(request)) from None
    inc = await _incident(request)
    viewer = {"name": who.name, "role": who.role, "csrf": csrf_token(request),
              "session": bool(request.get(SESSION))}
    # Referrer-Policy same-origin, not no-referrer: under no-referrer a browser sends
    # `Origin: null` on the page's own POSTs, which the CSRF check must refuse
    return web.Response(text=render(inc, datetime.now(UTC).date(), viewer,
                                       _links(request, same_origin=True)),
                        content_type="text/html",
                        charset="utf-8", headers={"Content-Security-Policy": CSP,
                                                  "X-Content-Type-Options": "nosniff",
                                                  "Referrer-Policy": "same-origin"})


def _links(request: web.Request, *, same_origin: bool = False) -> Any:
    """Where the links point: this server (the page's own origin, or the public URL for an
    export read elsewhere) and Grafana."""
    from processors.notify.message import Links

    settings = request.app[SETTINGS]
    return Links(api="" if same_origin else settings.public_url,
                 grafana=settings.grafana_url)


async def static(request: web.Request) -> web.Response:
    """The review page's one script (its stylesheet is inline, admitted by the CSP's hash)
    and the sign-in pages' stylesheet."""
    from jobtrail.views.review import PAGE_JS
    from jobtrail.views.signin import STYLESHEET

    if request.match_info["name"] == "postmortem.js":
        return web.Response(text=PAGE_JS, content_type="text/javascript",
                            headers={"X-Content-Type-Options": "nosniff"})
    if request.match_info["name"] == "jobtrail.css":
        return web.Response(text=STYLESHEET, content_type="text/css",
                            headers={"X-Content-Type-Options": "nosniff"})
    fail(web.HTTPNotFound, "no such file")
