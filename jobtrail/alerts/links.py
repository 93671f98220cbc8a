"""The signed links a message carries: acknowledge (this incident, from this subscription,
until an expiry) and unsubscribe (RFC 8058).

An acknowledge link opens a page (`jobtrail.http.links`); the person who presses its
button is signed in and is who the log records. The link itself may do only what both that
person and the subscription's creator may do now (`creator_now`, `may_acknowledge`)."""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from jobtrail.alerts.secrets import MissingSecret, Secrets
from jobtrail.identity.principal import ROLES
from processors.notify.model import Creator, Subscription

ACK_LINK_TTL_S = 24 * 3600
"""How long an acknowledge link in a message works after the decision it carries."""


def ack_token(secrets: Secrets, incident_id: str, sub_id: str, expires: int) -> str:
    """The HMAC in a message's acknowledge link: for this incident, from this subscription,
    until `expires` (epoch s)."""
    return unsubscribe_token(secrets, f"ack\x00{incident_id}\x00{sub_id}\x00{expires}")


def ack_link(public_url: str, secrets: Secrets, incident_id: str, sub_id: str,
             expires: int) -> str:
    token = ack_token(secrets, incident_id, sub_id, expires)
    return (f"{public_url}/v1/incidents/{incident_id}/ack?sub={sub_id}&expires={expires}"
            f"&token={token}")


def unsubscribe_token(secrets: Secrets, sub_id: str) -> str:
    """The HMAC in an email's unsubscribe link (and, over another text, an acknowledge
    link). Its key: JOBTRAIL_UNSUBSCRIBE_KEY (shared by the API and the deliverer in a
    cluster), else one made once in HOME's secret store."""
    try:
        key = secrets.env.get("JOBTRAIL_UNSUBSCRIBE_KEY") or secrets.get(
            "secret:unsubscribe-key")
    except MissingSecret:
        import secrets as random

        secrets.put("unsubscribe-key", random.token_hex(32))
        key = secrets.get("secret:unsubscribe-key")
    return hmac.new(key.encode(), sub_id.encode(), hashlib.sha256).hexdigest()[:32]


def creator_now(settings: Any, sub: Subscription) -> tuple[Creator | None, str]:
    """The subscription's creator as their credentials say now, or None and why not.

    The host's operator (a subscription made with the CLI, or recorded before creators
    were) is an operator still. A creator who signed in with an API token is looked up
    among the tokens configured now: demoted, narrowed or removed, the link follows. One
    who signed in through OpenID Connect or the auth proxy has no record here between
    sign-ins: the role and projects they had when they made it stand (docs/subscriptions.md)."""
    from jobtrail.identity import Principal

    made = sub.creator
    if made is None:
        if not sub.created_by:
            return Creator(name=sub.owner, credential="cli:", role="admin", operator=True), ""
        made = Creator(name=sub.created_by, credential="token:", role="commander",
                       projects=sub.projects)
    if made.credential.startswith("cli:"):
        return made, ""
    if not made.credential.startswith("token:"):
        return made, ""
    found = [p for p in (Principal.from_grants(token, grants)
                         for token, grants in settings.api_tokens.items()) if p.name == made.name]
    if not found:
        return None, (f"{made.name}, who made the subscription behind this link, no longer has "
                      "a configured token")
    best = max(found, key=lambda p: (ROLES.index(p.role), p.operator, len(p.projects)))
    return Creator(name=best.name, kind=best.kind, credential=best.credential, role=best.role,
                   projects=tuple(sorted(best.projects)), operator=best.operator), ""


def may_acknowledge(who: Creator, touched: set[str], sub: Subscription) -> str:
    """Why `who` (the person clicking, or the link's creator) may not acknowledge an
    incident touching `touched` through `sub`'s link ('' when they may): the ack role, every
    impacted project (as the API's `ack`), and a tenant subscription's own projects."""
    from jobtrail.identity.roles import command_role

    need = command_role("ack", {})
    if who.role not in ROLES or ROLES.index(who.role) < ROLES.index(need):
        return f"acknowledging needs the {need} role; {who.name} is a {who.role or 'nobody'}"
    if sub.projects and (not touched or not touched <= set(sub.projects)):
        return (f"the incident also impacts {len(touched - set(sub.projects))} other "
                "project(s) than this subscription's: only an operator, or someone holding "
                "every impacted project, may acknowledge it")
    if not who.operator and (not touched or not touched <= set(who.projects)):
        return (f"the incident also impacts {len(touched - set(who.projects))} project(s) "
                f"{who.name} does not hold: only an operator, or someone holding every "
                "impacted project, may acknowledge it")
    return ""
