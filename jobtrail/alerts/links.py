"""The signed links a message carries: acknowledge (this incident, from this subscription,
until an expiry; single use through the command id it derives) and unsubscribe (RFC 8058)."""

from __future__ import annotations

import hashlib
import hmac

from jobtrail.alerts.secrets import MissingSecret, Secrets

ACK_LINK_TTL_S = 24 * 3600
"""How long an acknowledge link in a message works after the decision it carries."""


def ack_token(secrets: Secrets, incident_id: str, sub_id: str, expires: int) -> str:
    """The HMAC in a message's acknowledge link: for this incident, from this subscription,
    until `expires` (epoch s). Single use comes from the incident log: the ack is a command
    whose id is derived from the token, so a second use changes nothing."""
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
