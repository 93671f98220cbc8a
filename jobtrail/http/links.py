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
    acknowledge); POST acknowledges as the subscription's owner. Authenticated by the HMAC
    in the link (incident, subscription, expiry), not a bearer; single use: the command's id
    comes from the token, so a second POST appends nothing (410)."""
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
    found = await request.app[BACKEND].call(alerts.subscription, sub_id, None)
    if found is None:
        fail(web.HTTPForbidden, "the subscription behind this link is gone")
    owner = found[0].owner
    if request.method == "GET":
        return reply({"incident": incident_id, "confirm": "POST this URL to acknowledge it "
                      f"as {owner}"})
    actor = Actor(kind="team" if owner.startswith("team:") else "person",
                  name=owner.removeprefix("team:") or sub_id,
                  credential=f"ack-link:{sub_id}")  # the signed link is the credential
    command = Command(command_id="ack-link-" + token[:24], incident_id=incident_id,
                      command="ack", actor=actor, time=datetime.now(UTC))
    try:
        events = await request.app[BACKEND].command(command)
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
