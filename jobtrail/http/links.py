"""The links in a message, over HTTP: acknowledge an incident (a page for a signed-in person)
and unsubscribe from an email (authenticated by the HMAC in the link alone). A GET only says
what a POST would do, so a link scanner changes nothing."""

from __future__ import annotations

import hmac
import html
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from jobtrail.http.alerts import _parts
from jobtrail.http.common import BACKEND, SESSION, SETTINGS, fail, reply
from jobtrail.http.guard import authenticate, check_csrf, csrf_token
from jobtrail.http.login import login_url
from processors.notify.model import Creator


async def unsubscribe(request: web.Request) -> web.Response:
    """The email's List-Unsubscribe target (RFC 8058 one-click: POST; GET shows a form's
    worth of confirmation). Authenticated by the HMAC token in the link, not a bearer."""
    from jobtrail.alerts.links import unsubscribe_token

    alerts, secrets, _ = _parts(request)
    sub_id = request.match_info["sub_id"]
    token = request.query.get("token", "")
    expected = unsubscribe_token(secrets, sub_id)
    if not hmac.compare_digest(token.encode(), expected.encode()):
        fail(web.HTTPForbidden, "invalid unsubscribe link")
    found = await request.app[BACKEND].call(alerts.subscription, sub_id, None)
    if found is None:
        return reply({"unsubscribed": sub_id})
    if request.method == "GET":
        return reply({"subscription": sub_id, "confirm": "POST this URL to unsubscribe"})
    sub = found[0].model_copy(update={"enabled": False,
                                      "disabled_reason": "unsubscribed from an email"})
    await request.app[BACKEND].call(alerts.put_subscription, sub, "unsubscribe-link")
    return reply({"unsubscribed": sub_id})


def _wants_json(request: web.Request) -> bool:
    accept = request.headers.get("Accept", "")
    return "application/json" in accept and "text/html" not in accept


async def acknowledge(request: web.Request) -> web.StreamResponse:
    """A message's acknowledge link: a page (`jobtrail.views.ack`) with one button, for a
    person signed in (the existing login; a browser not signed in goes there and comes
    back). GET only shows (a link scanner never acknowledges); the button's POST
    acknowledges as that person, never as the subscription or its owner. Authenticated
    twice: the HMAC in the link (incident, subscription, expiry) says which message it came
    from, the sign-in says who presses it. The link may do only what both the person and the
    subscription's creator may do now (`jobtrail.alerts.links.may_acknowledge`). Once
    acknowledged, by anyone, the link's page says who did and when."""
    import time

    from jobtrail.alerts.links import ack_token, creator_now, may_acknowledge
    from jobtrail.views.ack import AckState, acknowledged

    alerts, secrets, settings = _parts(request)
    incident_id = request.match_info["incident_id"]
    sub_id = request.query.get("sub", "")
    token = request.query.get("token", "")
    try:
        expires = int(request.query.get("expires", ""))
    except ValueError:
        fail(web.HTTPForbidden, "invalid acknowledge link")
    expected = ack_token(secrets, incident_id, sub_id, expires)
    if not hmac.compare_digest(token.encode(), expected.encode()):
        fail(web.HTTPForbidden, "invalid acknowledge link")
    try:
        who = authenticate(request)
    except web.HTTPUnauthorized:
        if request.method == "GET" and not _wants_json(request):
            return _signin_hop(request)
        raise
    if request.method == "POST":
        await check_csrf(request)
    backend = request.app[BACKEND]
    found = await backend.call(alerts.subscription, sub_id, None)
    if found is None:
        fail(web.HTTPForbidden, "the subscription behind this link is gone")
    sub = found[0]
    full = await backend.call(backend.store.incident, incident_id, None)
    # what the page shows is the incident as the person may see it (their projects' jobs,
    # impact and evidence only), like every read; the whole one only decides
    shown = await backend.call(backend.store.incident, incident_id, who.scope)
    if full is None or shown is None:
        fail(web.HTTPNotFound, "no such incident")
    touched = set(full["projects"])
    person = Creator.of(who)
    creator, gone = creator_now(settings, sub)
    done = acknowledged(shown)
    if done is not None:
        state = AckState("done", by=done[0], at=done[1])
    elif time.time() > expires:
        state = AckState("expired")
    elif why := may_acknowledge(person, touched, sub):
        state = AckState("refused", why=why)
    elif creator is None or (why := may_acknowledge(creator, touched, sub)):
        state = AckState("refused", why="this link may do only what the subscription's "
                                        f"creator may do now: {gone or why}")
    else:
        state = AckState("offer")
    if request.method == "POST" and state.kind == "offer":
        state = await _acknowledge(request, who, incident_id, token)
        if state.kind == "done" and not _wants_json(request):
            raise web.HTTPSeeOther(request.path_qs)  # the page then says who and when
    status = {"refused": 403, "expired": 410, "queued": 202}.get(state.kind, 200)
    if _wants_json(request):
        return reply(_json(incident_id, state, person), status=status)
    return _page(request, shown, state, who, status)


def _signin_hop(request: web.Request) -> web.StreamResponse:
    """A browser that is not signed in, as far as this request shows. A link clicked in a
    chat app is a cross-site navigation, on which the browser withholds the `SameSite=Strict`
    session cookie: the first answer is a page that reloads the link from this site (its
    cookie then comes along); only a request that still carries no session goes to sign
    in, and comes back here after (`next`)."""
    if request.query.get("hop") == "1":
        raise web.HTTPFound(login_url(request))
    again = html.escape(f"{request.path_qs}&hop=1", quote=True)
    return web.Response(
        text=f"<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">"
             f"<title>Acknowledge</title></head><body><p><a id=\"next\" href=\"{again}\">"
             "Continue to acknowledge</a></p></body></html>\n",
        content_type="text/html", charset="utf-8",
        headers={"Refresh": f"0; url={request.path_qs}&hop=1", "Cache-Control": "no-store",
                 "Content-Security-Policy": "default-src 'none'",
                 "Referrer-Policy": "same-origin"})


async def _acknowledge(request: web.Request, who: Any, incident_id: str,
                       token: str) -> Any:
    from jobtrail.views.ack import AckState
    from processors.incidents.model import Command, InvalidTransition

    command = Command(command_id=who.command_id("ack-link-" + token[:24]),
                      incident_id=incident_id, command="ack", actor=who.actor(),
                      time=datetime.now(UTC))
    try:
        events = await request.app[BACKEND].command(command)
    except InvalidTransition as exc:
        return AckState("refused", why=str(exc))
    if events is None:
        return AckState("queued")
    return AckState("done", by=who.name, at=command.time)


def _json(incident_id: str, state: Any, person: Creator) -> dict[str, Any]:
    out: dict[str, Any] = {"incident": incident_id, "state": state.kind}
    if state.kind == "offer":
        out["confirm"] = f"POST this URL to acknowledge it as {person.kind}:{person.name}"
    elif state.kind == "done":
        out.update(acknowledged_by=state.by, acknowledged_at=state.at.isoformat()
                   if state.at else None)
    elif state.why:
        out["error"] = state.why
    return out


def _page(request: web.Request, full: dict[str, Any], state: Any, who: Any,
          status: int) -> web.Response:
    from urllib.parse import quote

    from jobtrail.views.ack import page
    from jobtrail.views.postmortem import CSP
    from processors.notify.message import incident_dashboard

    settings = request.app[SETTINGS]
    viewer = {"name": who.name, "role": who.role, "csrf": csrf_token(request),
              "session": bool(request.get(SESSION))}
    inc = str(full.get("incident_id") or "")
    links = {"incident": f"/v1/incidents/{quote(inc)}",
             "dashboard": incident_dashboard(settings.grafana_url, inc)}
    return web.Response(text=page(full, state, viewer, links), status=status,
                        content_type="text/html", charset="utf-8",
                        headers={"Content-Security-Policy": CSP, "Cache-Control": "no-store",
                                 "X-Content-Type-Options": "nosniff",
                                 "Referrer-Policy": "same-origin"})


ROUTES = [
    ("GET", "/v1/subscriptions/{sub_id}/unsubscribe", unsubscribe),
    ("POST", "/v1/subscriptions/{sub_id}/unsubscribe", unsubscribe),
    ("GET", "/v1/incidents/{incident_id}/ack", acknowledge),
    ("POST", "/v1/incidents/{incident_id}/ack", acknowledge),
]
