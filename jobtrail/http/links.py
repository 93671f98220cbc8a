"""The links in a message, over HTTP: acknowledge an incident and unsubscribe from an email.
Authenticated by the HMAC in the link (jobtrail.alerts.links), not a bearer; a GET only says
what a POST would do, so a link scanner changes nothing."""

from __future__ import annotations

import hmac
from datetime import UTC, datetime

from aiohttp import web

from jobtrail.http.alerts import _parts
from jobtrail.http.common import BACKEND, fail, reply


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


async def acknowledge(request: web.Request) -> web.Response:
    """A message's acknowledge link: GET shows what it will do (a link scanner must not
    acknowledge); POST acknowledges as the subscription's creator. Authenticated by the HMAC
    in the link (incident, subscription, expiry), not a bearer; single use: the command's id
    comes from the token, so a second POST appends nothing (410). The link may do what the
    subscription's creator may: a tenant's link acknowledges only an incident within its
    projects, and the actor is the creator, never the `owner` the creator wrote."""
    import time

    from jobtrail.alerts.links import ack_token
    from processors.incidents.model import Actor, Command, InvalidTransition

    alerts, secrets, _ = _parts(request)
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
    if time.time() > expires:
        fail(web.HTTPGone, "this acknowledge link has expired: acknowledge in jobtrail "
                           f"(jobtrail incident ack {incident_id})")
    backend = request.app[BACKEND]
    found = await backend.call(alerts.subscription, sub_id, None)
    if found is None:
        fail(web.HTTPForbidden, "the subscription behind this link is gone")
    sub = found[0]
    full = await backend.call(backend.store.incident, incident_id, None)
    if full is None:
        fail(web.HTTPNotFound, "no such incident")
    # the link may do what its subscription's creator may: a tenant's subscription (bound to
    # its creator's projects) acknowledges only an incident within those projects, as the
    # API's `ack` (`http.incidents._authorise`)
    touched = set(full["projects"])
    if sub.projects and (not touched or not touched <= set(sub.projects)):
        fail(web.HTTPForbidden, f"the incident also impacts {len(touched - set(sub.projects))} "
                                "other project(s): only an operator, or a token holding every "
                                "impacted project, may acknowledge it (jobtrail incident ack "
                                f"{incident_id})")
    # who acts is who made the subscription (its `owner` is a name its creator wrote)
    if sub.created_by:
        actor = Actor(kind="person", name=sub.created_by,
                      credential=f"ack-link:{sub_id}")  # the signed link is the credential
    else:  # made by an operator, whose word the owner is
        actor = Actor(kind="team" if sub.owner.startswith("team:") else "person",
                      name=sub.owner.removeprefix("team:") or sub_id,
                      credential=f"ack-link:{sub_id}")
    if request.method == "GET":
        return reply({"incident": incident_id, "confirm": "POST this URL to acknowledge it "
                      f"as {actor.kind}:{actor.name}"})
    command = Command(command_id="ack-link-" + token[:24], incident_id=incident_id,
                      command="ack", actor=actor, time=datetime.now(UTC))
    try:
        events = await backend.command(command)
    except InvalidTransition as exc:
        fail(web.HTTPConflict, f"not acknowledged: {exc}")
    if events is None:
        return reply({"queued": command.command_id}, status=202)
    if not events:
        fail(web.HTTPGone, "this acknowledge link was already used")
    return reply({"acknowledged": incident_id, "by": actor.label()})


ROUTES = [
    ("GET", "/v1/subscriptions/{sub_id}/unsubscribe", unsubscribe),
    ("POST", "/v1/subscriptions/{sub_id}/unsubscribe", unsubscribe),
    ("GET", "/v1/incidents/{incident_id}/ack", acknowledge),
    ("POST", "/v1/incidents/{incident_id}/ack", acknowledge),
]
