"""OpenID Connect login: the authorization code flow with PKCE (RFC 7636) against one
configured issuer, and the ID token verified against the issuer's JWKS (PyJWT).

`start` makes the authorization request and the state it must come back with (state, nonce,
PKCE verifier: kept in a signed, short-lived cookie; the HTTP layer records the state's use in
the store, `jobtrail.identity.ledger`); `finish` checks the returned state, has it claimed
(used once), exchanges the code with the verifier, and verifies the ID token: signature by
a key of the issuer's JWKS with an asymmetric algorithm the issuer announces, `iss`, `aud`
(and `azp` when there are several audiences), `exp`, `iat`, and the nonce. Claims map to a
principal through configured claim names.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote, urlencode

import aiohttp
import jwt

from jobtrail.identity.config import OidcConfig
from jobtrail.identity.principal import ROLES, Principal

ASYMMETRIC = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384",
              "ES512", "EdDSA")
"""Never HS* (the client secret would become a signing key) and never `none`."""
TIMEOUT = aiohttp.ClientTimeout(total=10)


__all__ = ["OidcClient", "OidcConfig", "OidcError"]


class OidcError(Exception):
    """A login that cannot complete; the message is safe to show the person."""


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


class OidcClient:
    def __init__(self, config: OidcConfig) -> None:
        self.config = config
        self._meta: dict[str, Any] | None = None
        self._jwks: jwt.PyJWKClient | None = None

    async def metadata(self) -> dict[str, Any]:
        """The issuer's discovery document (fetched once; its `issuer` must be ours)."""
        if self._meta is None:
            url = self.config.issuer.rstrip("/") + "/.well-known/openid-configuration"
            try:
                async with aiohttp.ClientSession(timeout=TIMEOUT) as http, \
                        http.get(url) as resp:
                    if resp.status != 200:
                        raise OidcError(f"the issuer's discovery answered {resp.status}")
                    meta = await resp.json(content_type=None)
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                raise OidcError(f"the issuer's discovery failed: {type(exc).__name__}") from None
            if not isinstance(meta, dict) or meta.get("issuer") != self.config.issuer:
                raise OidcError("the discovery document names another issuer")
            for key in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
                if not isinstance(meta.get(key), str):
                    raise OidcError(f"the discovery document has no {key}")
            self._meta = meta
            self._jwks = jwt.PyJWKClient(meta["jwks_uri"], cache_keys=True, timeout=10)
        return self._meta

    async def start(self, next_path: str) -> tuple[str, dict[str, Any]]:
        """The authorization URL to send the browser to, and the login state to keep."""
        meta = await self.metadata()
        state, nonce = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
        verifier = secrets.token_urlsafe(48)
        challenge = _b64(hashlib.sha256(verifier.encode()).digest())
        query = urlencode({"response_type": "code", "client_id": self.config.client_id,
                           "redirect_uri": self.config.redirect_uri,
                           "scope": self.config.scopes, "state": state, "nonce": nonce,
                           "code_challenge": challenge, "code_challenge_method": "S256"})
        endpoint = meta["authorization_endpoint"]
        url = f"{endpoint}{'&' if '?' in endpoint else '?'}{query}"
        return url, {"state": state, "nonce": nonce, "verifier": verifier, "next": next_path}

    async def finish(self, kept: dict[str, Any], params: dict[str, str],
                     claim: Callable[[str], Awaitable[str]] | None = None) -> dict[str, Any]:
        """The verified ID token claims for the callback's `params`. `claim(state)` uses the
        login state up before the code is exchanged ('' when this answer may use it, else
        why not): a state is good for one answer, whatever the issuer allows of its code."""
        if params.get("error"):
            raise OidcError(f"the issuer refused the login: {params['error'][:100]}")
        if not hmac.compare_digest(str(params.get("state", "")).encode(),
                                   str(kept.get("state", "")).encode()):
            raise OidcError("state mismatch: this answer is not for the login started here")
        code = params.get("code", "")
        if not code:
            raise OidcError("the issuer's answer has no code")
        if claim is not None and (refused := await claim(str(kept["state"]))):
            raise OidcError(refused)
        meta = await self.metadata()
        form = {"grant_type": "authorization_code", "code": code,
                "redirect_uri": self.config.redirect_uri, "code_verifier": kept["verifier"],
                "client_id": self.config.client_id}
        headers = {"Authorization": _basic(self.config.client_id, self.config.client_secret)} \
            if self.config.client_secret else {}
        try:
            async with aiohttp.ClientSession(timeout=TIMEOUT) as http, \
                    http.post(meta["token_endpoint"], data=form, headers=headers) as resp:
                answer = await resp.json(content_type=None)
                status = resp.status
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise OidcError(f"the token request failed: {type(exc).__name__}") from None
        if status != 200 or not isinstance(answer, dict) or \
                not isinstance(answer.get("id_token"), str):
            raise OidcError(f"the token endpoint answered {status} without an ID token")
        return await asyncio.to_thread(self.verify, answer["id_token"], str(kept["nonce"]))

    def verify(self, id_token: str, nonce: str) -> dict[str, Any]:
        """The claims of a valid ID token for this client and login (OidcError otherwise)."""
        meta = self._meta or {}
        announced = meta.get("id_token_signing_alg_values_supported") or ["RS256"]
        algorithms = [a for a in ASYMMETRIC if a in announced]
        if self._jwks is None or not algorithms:
            raise OidcError("the issuer announces no asymmetric signing algorithm")
        try:
            key = self._jwks.get_signing_key_from_jwt(id_token)
            claims: dict[str, Any] = jwt.decode(
                id_token, key.key, algorithms=algorithms, audience=self.config.client_id,
                issuer=self.config.issuer, leeway=self.config.leeway_s,
                options={"require": ["exp", "iat", "iss", "aud", "sub"]})
        except jwt.ExpiredSignatureError:
            raise OidcError("the ID token has expired") from None
        except jwt.InvalidAudienceError:
            raise OidcError("the ID token is for another client (aud)") from None
        except jwt.InvalidIssuerError:
            raise OidcError("the ID token is from another issuer") from None
        except jwt.PyJWTError as exc:
            raise OidcError(f"the ID token is not valid: {type(exc).__name__}") from None
        audiences = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
        if len(audiences) > 1 and claims.get("azp") != self.config.client_id:
            raise OidcError("the ID token has several audiences and another azp")
        if not hmac.compare_digest(str(claims.get("nonce", "")).encode(), nonce.encode()):
            raise OidcError("nonce mismatch: the ID token was not issued for this login")
        return claims

    def principal(self, claims: dict[str, Any]) -> Principal:
        c = self.config
        name = claims.get(c.user_claim) or claims["sub"]
        teams = _strings(claims.get(c.teams_claim))
        projects = _strings(claims.get(c.projects_claim))
        roles = [r for r in _strings(claims.get(c.role_claim)) if r in ROLES]
        role = max(roles, key=ROLES.index) if roles else c.default_role
        return Principal(str(name)[:200], frozenset(projects - {"*"}), operator="*" in projects,
                         role=role, kind="person", teams=frozenset(teams),
                         credential=f"oidc:{c.issuer}"[:200])


def _basic(client_id: str, secret: str) -> str:
    """client_secret_basic: each part form-encoded first (RFC 6749 section 2.3.1)."""
    pair = f"{quote(client_id, safe='')}:{quote(secret, safe='')}"
    return "Basic " + base64.b64encode(pair.encode()).decode()


def _strings(value: Any) -> set[str]:
    if isinstance(value, str):
        return {v for v in value.replace(",", " ").split() if v}
    if isinstance(value, list):
        return {str(v) for v in value if isinstance(v, str | int) and str(v)}
    return set()
