"""Postmortem routes: read and export, the review verbs, follow-ups, and the review page.

A postmortem is read folded from its incident's log. Who may read it: an operator, or a token
holding every project the incident touches (a postmortem tells the whole story, so a tenant
of one project of a shared incident is refused with 403 saying so); an incident touching
none of the caller's projects is 404, like every read. The verbs are incident commands with
the lifecycle policy (`incidents._authorise`).

The page (`/incidents/{id}/postmortem`) authenticates like the API (a bearer header from a
proxy), or with the `jobtrail_token` cookie set by `POST /ui/login`; a state-changing call
authenticated by the cookie must carry `X-Jobtrail-UI: 1`, which a cross-site form cannot
send (with the cookie's SameSite=Strict, the CSRF defence).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from jobtrail.http.common import BACKEND, SETTINGS, fail, known, principal, reply
from jobtrail.http.incidents import _authorise, scope

VERBS = {"draft": "draft_postmortem", "edit": "edit_postmortem", "review": "request_review",
         "request-changes": "request_changes", "approve": "approve_postmortem",
         "publish": "publish_postmortem", "waive": "waive_postmortem",
         "learning": "record_learning", "sample": "record_learning",
         "monitor": "record_learning", "runbook": "record_learning",
         "amend": "amend_postmortem"}
FIELDS = {"amend_postmortem": ("section", "text", "why"), "draft_postmortem": ("owner",),
          "edit_postmortem": ("section", "text"),
          "request_review": ("reviewers",), "request_changes": ("comment",),
          "approve_postmortem": ("comment",), "publish_postmortem": (),
          "waive_postmortem": ("reason",), "record_learning": ("learning", "reason")}
"""What each verb reads from the body. `learning` declines one with a reason; `sample`,
`monitor` (body `rules`: the YAML of the rules change) and `runbook` make the artefact under
HOME/learnings/, check it, and record it, like `jobtrail postmortem sample|monitor|runbook`."""
MADE = ("sample", "monitor", "runbook")
REQUIRED = {"edit": ("section", "text"), "amend": ("section", "text", "why"),
            "request-changes": ("comment",),
            "waive": ("reason",), "learning": ("learning",), "monitor": ("rules",)}


def _make(settings: Any, store: Any, incident_id: str, verb: str,
          body: dict[str, Any]) -> dict[str, str]:
    """Make and check one learning artefact (in a worker thread); LearningFailed says why."""
    from pathlib import Path

    import yaml

    from jobtrail.learn import lessons as learn
    from jobtrail.views.postmortem import state

    inc = state(store.incident_log(incident_id))
    if inc is None:
        raise learn.LearningFailed("no such incident")
    base = settings.home / "learnings"
    if verb == "sample":
        spec = yaml.safe_load(settings.topology_file.read_text()) if settings.topology_file \
            else None
        done = learn.write_sample(store, inc, base / "samples" / f"sample-{incident_id}.yaml",
                                  spec)
    elif verb == "monitor":
        rules = body.get("rules")
        if not isinstance(rules, str) or not rules.strip():
            raise learn.LearningFailed("rules: the YAML of the proposed rules change")
        recorded = inc.pm.learnings.get("sample")
        if recorded is None or not recorded.path or not Path(recorded.path).exists():
            raise learn.LearningFailed("no failure sample recorded: make one first "
                                       "(POST .../postmortem/sample)")
        name = hashlib.sha256(rules.encode()).hexdigest()[:12]
        done = learn.write_monitor(Path(recorded.path), rules,
                                   base / "monitors" / f"monitor-{incident_id}-{name}.yaml")
    else:
        done = learn.write_runbook(inc, base / "runbooks")
    return learn.learning_data(verb, done)


async def _incident(request: web.Request) -> Any:
    """The folded incident, after the read policy."""
    from jobtrail.views.postmortem import state

    backend = request.app[BACKEND]
    incident_id = request.match_info["incident_id"]
    who = principal(request)
    full = await backend.call(backend.store.incident, incident_id, None)
    if full is None or not (who.operator or set(full["projects"]) & who.projects):
        fail(web.HTTPNotFound, "no such incident")
    if not who.operator and not set(full["projects"]) <= who.projects:
        fail(web.HTTPForbidden, "the incident also impacts other projects: its postmortem is "
                                "readable by an operator or a token holding all of them")
    if not who.operator and not full["projects"]:
        fail(web.HTTPNotFound, "no such incident")
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
    return web.Response(text=export(inc, fmt, today), content_type=kind, charset="utf-8",
                        headers=headers)


async def command(request: web.Request) -> web.Response:
    """`POST /v1/incidents/{id}/postmortem/{verb}` `{"by": ..., "command_id": ..., ...}`:
    200 with the postmortem after it (embedded), 202 queued (cluster), 403, 409 with the
    reason the state refuses it, 422 for a malformed body."""
    from jobtrail.views.postmortem import document, state
    from processors.incidents.model import Actor, Command, InvalidTransition

    verb = request.match_info["verb"]
    if verb not in VERBS:
        fail(web.HTTPNotFound, f"no postmortem verb {verb!r} (one of {', '.join(VERBS)})")
    who = principal(request)
    if "Authorization" not in request.headers and request.cookies.get("jobtrail_token") \
            and request.headers.get("X-Jobtrail-UI") != "1":
        fail(web.HTTPForbidden, "a cookie-authenticated change needs X-Jobtrail-UI: 1")
    backend = request.app[BACKEND]
    incident_id = request.match_info["incident_id"]
    full = await backend.call(backend.store.incident, incident_id, None)
    if full is None or not (who.operator or set(full["projects"]) & who.projects):
        fail(web.HTTPNotFound, "no such incident")
    name = VERBS[verb]
    try:
        body = json.loads(await request.read() or b"{}")
        if not isinstance(body, dict):
            raise ValueError("the body must be a JSON object")
        by = str(body.get("by") or "")
        data = {k: body[k] for k in FIELDS[name] if k in body}
        for required in REQUIRED.get(verb, ()):
            if not isinstance(body.get(required), str) or not body[required].strip():
                raise ValueError(f"{required}: required ({verb} needs "
                                 f"{' and '.join(REQUIRED[verb])})")
        if verb == "learning" and not data.get("reason"):
            raise ValueError("reason: a declined learning needs a reason (make one with "
                             "POST .../postmortem/sample, monitor or runbook)")
        cmd = Command(command_id=str(body.get("command_id") or f"http-{uuid.uuid4().hex}"),
                      incident_id=incident_id, command=name,
                      actor=Actor(kind="team" if by.startswith("team:") else "person",
                                  name=by.removeprefix("team:")),
                      time=datetime.now(UTC), data=data)
    except (ValueError, RecursionError) as exc:
        errors = getattr(exc, "errors", None)
        detail = errors()[0] if callable(errors) else {"msg": str(exc)}
        where = ".".join(str(x) for x in detail.get("loc", ()))
        fail(web.HTTPUnprocessableEntity, f"{where}: {detail['msg']}" if where
             else str(detail["msg"]))
    cmd = cmd.model_copy(update={"data": _authorise(who, name, full, cmd.data)})
    if verb in MADE:
        from jobtrail.learn.lessons import LearningFailed

        try:
            made = await backend.call(_make, request.app[SETTINGS], backend.store, incident_id,
                                      verb, body)
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
    overdue = request.query.get("overdue", "") in ("1", "true", "yes")
    rows = await backend.call(backend.store.followups, scope(request),
                              team=request.query.get("team", ""),
                              status=request.query.get("status", ""),
                              overdue_on=datetime.now(UTC).date().isoformat() if overdue
                              else "")
    return reply({"followups": rows})


# --- the page -------------------------------------------------------------------------------


async def page(request: web.Request) -> web.Response:
    from jobtrail.views.postmortem import CSP
    from jobtrail.views.postmortem import page as render

    inc = await _incident(request)
    return web.Response(text=render(inc, datetime.now(UTC).date()), content_type="text/html",
                        charset="utf-8", headers={"Content-Security-Policy": CSP,
                                                  "X-Content-Type-Options": "nosniff",
                                                  "Referrer-Policy": "no-referrer"})


async def static(request: web.Request) -> web.Response:
    from jobtrail.views.postmortem import PAGE_CSS, PAGE_JS

    name = request.match_info["name"]
    if name == "postmortem.js":
        return web.Response(text=PAGE_JS, content_type="text/javascript",
                            headers={"X-Content-Type-Options": "nosniff"})
    if name == "postmortem.css":
        return web.Response(text=PAGE_CSS, content_type="text/css",
                            headers={"X-Content-Type-Options": "nosniff"})
    fail(web.HTTPNotFound, "no such file")


async def login(request: web.Request) -> web.Response:
    """`POST /ui/login` (form field `token`): sets the page's cookie when the token is known."""
    if request.content_type != "application/x-www-form-urlencoded":
        fail(web.HTTPBadRequest, "send the token as an application/x-www-form-urlencoded form")
    form = await request.post()
    token = str(form.get("token") or "")
    tokens = request.app[SETTINGS].api_tokens
    if tokens and known(tokens, token) is None:
        fail(web.HTTPUnauthorized, "unknown token")
    response = web.json_response({"ok": True})
    response.set_cookie("jobtrail_token", token, httponly=True, samesite="Strict",
                        secure=request.secure, path="/")
    return response
