"""The browser session: a signed cookie, its anti-CSRF token, and logout.

A cookie value is `base64url(json).base64url(HMAC-SHA256(key, purpose, json))`: the server
keeps no session table, only the key (`JOBTRAIL_SESSION_KEY`; without it a random key per
process, so sessions end at a restart). Logouts are kept in the store, where a restart and
every other process see them (`jobtrail.identity.ledger`); `Sessions` remembers the ones this
process has seen (bounded), so a logged-out cookie replayed here costs no query. The purpose
separates the session cookie from the short-lived login cookie (OIDC state, nonce and PKCE
verifier), so one is never accepted as the other. The anti-CSRF token is derived from the
session id, so a page can carry it and a cross-site form cannot know it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from typing import Any

SESSION_COOKIE = "jobtrail_session"
LOGIN_COOKIE = "jobtrail_login"
CSRF_HEADER = "X-Jobtrail-CSRF"
MAX_REVOKED = 100_000


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Sessions:
    def __init__(self, key: bytes, max_age_s: float = 8 * 3600) -> None:
        self._key = key or secrets.token_bytes(32)
        self.max_age_s = max_age_s
        self._revoked: dict[str, float] = {}

    def _mac(self, purpose: str, payload: bytes) -> bytes:
        return hmac.new(self._key, purpose.encode() + b"\0" + payload, hashlib.sha256).digest()

    def seal(self, purpose: str, data: dict[str, Any]) -> str:
        payload = json.dumps(data, separators=(",", ":"), sort_keys=True).encode()
        return f"{_b64(payload)}.{_b64(self._mac(purpose, payload))}"

    def open(self, purpose: str, value: str, now: float) -> dict[str, Any] | None:
        """The data of a cookie this server sealed for `purpose`, unexpired; else None."""
        body, dot, mac = value.partition(".")
        if not dot or len(value) > 16384:
            return None
        try:
            payload, given = _unb64(body), _unb64(mac)
        except ValueError:
            return None
        if not hmac.compare_digest(given, self._mac(purpose, payload)):
            return None
        try:
            data = json.loads(payload)
        except ValueError:
            return None
        if not isinstance(data, dict) or not isinstance(data.get("exp"), int | float) \
                or data["exp"] <= now:
            return None
        if purpose == "session" and data.get("sid") in self._revoked:
            return None
        return data

    def issue(self, now: float, **data: Any) -> str:
        """A new session cookie value holding `data` (a principal, or a token's digest)."""
        return self.seal("session", {**data, "sid": secrets.token_urlsafe(18),
                                     "exp": int(now + self.max_age_s)})

    def revoke(self, session: dict[str, Any], now: float) -> None:
        """Remember a session as logged out in this process (the store holds it for all)."""
        if len(self._revoked) >= MAX_REVOKED:
            self._revoked = {k: v for k, v in self._revoked.items() if v > now}
        if len(self._revoked) < MAX_REVOKED:
            self._revoked[str(session.get("sid"))] = float(session.get("exp") or now)

    def csrf(self, sid: str) -> str:
        """The anti-CSRF token of a session (or of a proxy-authenticated user)."""
        return _b64(self._mac("csrf", sid.encode()))[:32]


def token_digest(token: str) -> str:
    """What a token-login session holds instead of the token (resolved again per request, so
    removing the token from the configuration ends its sessions)."""
    return hashlib.sha256(token.encode()).hexdigest()
