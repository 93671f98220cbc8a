"""A small OpenID Connect issuer for the tests: discovery, JWKS, authorize and token over
real HTTP, signing ID tokens with a real RSA key (PyJWT). It checks what a real issuer checks
of the client (redirect URI, client secret, the PKCE verifier against the challenge) and
records what it received; `fault` makes it answer wrongly in one way, to show the client
refuses it: `bad_signature`, `wrong_audience`, `expired`, `wrong_nonce`, `wrong_state`.
`reuse_codes` makes it exchange a code as often as it is presented, as some issuers do
within a window: the client alone then keeps a login from completing twice."""

from __future__ import annotations

import base64
import hashlib
import secrets
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import jwt
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import rsa

KID = "test-key-1"


@dataclass
class Issuer:
    url: str
    client_id: str
    client_secret: str
    redirect_uri: str
    claims: dict[str, Any] = field(default_factory=dict)
    fault: str = ""
    reuse_codes: bool = False
    key: Any = field(default_factory=lambda: rsa.generate_private_key(65537, 2048))
    other_key: Any = field(default_factory=lambda: rsa.generate_private_key(65537, 2048))
    codes: dict[str, dict[str, Any]] = field(default_factory=dict)
    authorize_requests: list[dict[str, str]] = field(default_factory=list)
    token_requests: list[dict[str, str]] = field(default_factory=list)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/.well-known/openid-configuration", self.discovery)
        app.router.add_get("/jwks", self.jwks)
        app.router.add_get("/authorize", self.authorize)
        app.router.add_post("/token", self.token)
        return app

    async def discovery(self, request: web.Request) -> web.Response:
        return web.json_response({
            "issuer": self.url, "authorization_endpoint": f"{self.url}/authorize",
            "token_endpoint": f"{self.url}/token", "jwks_uri": f"{self.url}/jwks",
            "response_types_supported": ["code"], "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "code_challenge_methods_supported": ["S256"]})

    async def jwks(self, request: web.Request) -> web.Response:
        public = jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key(), as_dict=True)
        return web.json_response({"keys": [{**public, "kid": KID, "alg": "RS256",
                                            "use": "sig"}]})

    async def authorize(self, request: web.Request) -> web.Response:
        q = dict(request.query)
        self.authorize_requests.append(q)
        if q.get("client_id") != self.client_id or q.get("redirect_uri") != self.redirect_uri:
            return web.Response(status=400, text="unknown client or redirect_uri")
        if q.get("response_type") != "code" or q.get("code_challenge_method") != "S256":
            return web.Response(status=400, text="code flow with S256 PKCE only")
        code = secrets.token_urlsafe(16)
        self.codes[code] = {"nonce": q["nonce"], "challenge": q["code_challenge"]}
        state = "forged-state" if self.fault == "wrong_state" else q["state"]
        raise web.HTTPFound(f"{self.redirect_uri}?{urlencode({'code': code, 'state': state})}")

    async def token(self, request: web.Request) -> web.Response:
        form = {k: str(v) for k, v in (await request.post()).items()}
        self.token_requests.append(form)
        expected = "Basic " + base64.b64encode(
            f"{self.client_id}:{self.client_secret}".encode()).decode()
        if request.headers.get("Authorization") != expected:
            return web.json_response({"error": "invalid_client"}, status=401)
        grant = (self.codes.get if self.reuse_codes else self.codes.pop)(form.get("code", ""),
                                                                         None)
        if grant is None or form.get("grant_type") != "authorization_code":
            return web.json_response({"error": "invalid_grant"}, status=400)
        verifier = form.get("code_verifier", "")
        challenge = base64.urlsafe_b64encode(
            hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
        if challenge != grant["challenge"]:
            return web.json_response({"error": "invalid_grant", "why": "PKCE"}, status=400)
        return web.json_response({"access_token": "at", "token_type": "Bearer",
                                  "id_token": self.id_token(grant["nonce"])})

    def id_token(self, nonce: str) -> str:
        now = int(time.time())
        claims = {"iss": self.url, "sub": "u-123", "aud": self.client_id, "iat": now,
                  "exp": now + 300, "nonce": nonce, **self.claims}
        if self.fault == "wrong_audience":
            claims["aud"] = "another-client"
        if self.fault == "expired":
            claims["iat"], claims["exp"] = now - 7200, now - 3600
        if self.fault == "wrong_nonce":
            claims["nonce"] = "a-nonce-of-another-login"
        key = self.other_key if self.fault == "bad_signature" else self.key
        return jwt.encode(claims, key, algorithm="RS256", headers={"kid": KID})


async def start(issuer: Issuer, port: int) -> web.AppRunner:
    """Serve the issuer on localhost:`port` (a different site from 127.0.0.1)."""
    runner = web.AppRunner(issuer.app())
    await runner.setup()
    await web.TCPSite(runner, "localhost", port).start()
    return runner
