"""Signing people in to the web pages, and out.

- `GET /auth/login?next=/path`: with an OpenID Connect issuer configured, off to it
  (authorization code + PKCE; state, nonce and verifier in a signed 10-minute cookie, the
  state also recorded in the store); otherwise a form for an API token (`POST /ui/login`,
  accepted only from this site's pages).
- `GET /auth/callback`: the issuer's answer; its state used once (claimed in the store before
  the code is exchanged: a replayed answer is refused, on this process, after a restart and on
  every other one), the ID token verified, its claims mapped to a principal, a session cookie
  set. It answers with a page that moves on to `next` itself: the session cookie is
  `SameSite=Strict`, and a browser would not send it on a redirect chain that started at the
  issuer (another site).
- `POST /auth/logout`: ends the session (the cookie is cleared and its id recorded in the
  store as logged out: refused from then on by every process on the store, restarts
  included); CSRF-checked like every change.
- `GET /v1/whoami`: the caller's principal, as the API sees it.

Cookies are `HttpOnly`, `Secure` when served over TLS (or `JOBTRAIL_PUBLIC_URL` is https),
the session `SameSite=Strict`, the login state `SameSite=Lax` (it must come back with the
issuer's top-level redirect).
"""

from __future__ import annotations

import contextlib
import html
import logging
import time
from typing import Any

from aiohttp import web

from jobtrail.http.common import BACKEND, SESSION, SETTINGS, fail, known, reply
from jobtrail.http.guard import SESSIONS, check_csrf, csrf_token, principal
from jobtrail.identity.ledger import SignIns
from jobtrail.identity.oidc import OidcClient, OidcError
from jobtrail.identity.session import LOGIN_COOKIE, SESSION_COOKIE, token_digest

log = logging.getLogger("jobtrail.identity")
OIDC: web.AppKey[Any] = web.AppKey("oidc", object)
LOGIN_TTL_S = 600
PAGE_CSP = ("default-src 'none'; style-src 'self'; form-action 'self'; base-uri 'none'; "
            "frame-ancestors 'none'")


class _Unrecorded(Exception):
    """The store did not answer while a login state was used."""


def setup(app: web.Application) -> None:
    settings = app[SETTINGS]
    app[OIDC] = OidcClient(settings.oidc) if settings.oidc else None


def _secure(request: web.Request) -> bool:
    return request.secure or request.app[SETTINGS].public_url.startswith("https://")


def safe_next(value: str) -> str:
    """A local path to go to after login (never another site: `//host`, `\\host`, a URL)."""
    if not value.startswith("/") or value.startswith(("//", "/\\")) or "\\" in value \
            or any(ord(c) < 0x20 for c in value):
        return "/"
    return value[:2000]


def login_url(request: web.Request) -> str:
    from urllib.parse import quote

    return "/auth/login?next=" + quote(request.path_qs, safe="")


def _page(title: str, body: str, status: int = 200,
          headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        text=f"<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">"
             "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
             "<link rel=\"stylesheet\" href=\"/ui/jobtrail.css\">"
             f"<title>{html.escape(title)}</title></head><body>{body}</body></html>\n",
        status=status, content_type="text/html", charset="utf-8",
        headers={"Content-Security-Policy": PAGE_CSP, "X-Content-Type-Options": "nosniff",
                 "Referrer-Policy": "same-origin", "Cache-Control": "no-store",
                 **(headers or {})})


def _start_session(request: web.Request, response: web.StreamResponse, **data: Any) -> None:
    sessions = request.app[SESSIONS]
    response.set_cookie(SESSION_COOKIE, sessions.issue(time.time(), **data), httponly=True,
                        samesite="Strict", secure=_secure(request), path="/",
                        max_age=int(sessions.max_age_s))


async def login_page(request: web.Request) -> web.StreamResponse:
    """`GET /auth/login`: to the issuer, or the token form."""
    settings = request.app[SETTINGS]
    target = safe_next(request.query.get("next", "/"))
    client: OidcClient | None = request.app[OIDC]
    if client is not None:
        try:
            url, kept = await client.start(target)
        except OidcError as exc:
            log.warning("oidc login could not start: %s", exc)
            return _page("Sign-in unavailable", f"<p>{html.escape(str(exc))}</p>", 503)
        now = time.time()
        backend = request.app[BACKEND]
        try:
            await backend.call(SignIns(backend.store).start_login, str(kept["state"]), now,
                               now + LOGIN_TTL_S)
        except Exception as exc:
            log.warning("oidc login could not be recorded: %s: %s", type(exc).__name__, exc)
            return _page("Sign-in unavailable", "<p>The sign-in could not be recorded (the "
                         "store did not answer). Try again in a moment.</p>", 503)
        response = web.HTTPFound(url)
        sealed = request.app[SESSIONS].seal("login", {**kept, "exp": now + LOGIN_TTL_S})
        response.set_cookie(LOGIN_COOKIE, sealed, httponly=True, samesite="Lax",
                            secure=_secure(request), path="/auth", max_age=LOGIN_TTL_S)
        raise response
    if settings.api_tokens:
        from jobtrail.views.signin import token_form

        return _page("Sign in to jobtrail", token_form(target))
    if settings.auth_proxy_header:
        return _page("Sign in", "<p>Sign in through the site's auth proxy.</p>", 401)
    raise web.HTTPFound(target)


async def callback(request: web.Request) -> web.Response:
    """`GET /auth/callback`: the issuer's answer to the login started here."""
    client: OidcClient | None = request.app[OIDC]
    if client is None:
        fail(web.HTTPNotFound, "OpenID Connect is not configured")
    kept = request.app[SESSIONS].open("login", request.cookies.get(LOGIN_COOKIE, ""),
                                      time.time())
    if kept is None:
        return _page("Sign-in failed", "<p>This sign-in was not started here or took too long. "
                     "<a href=\"/auth/login\">Start again</a>.</p>", 400)
    backend = request.app[BACKEND]

    async def claim(state: str) -> str:
        try:
            refused: str = await backend.call(SignIns(backend.store).claim_login, state,
                                              time.time())
            return refused
        except Exception as exc:
            log.warning("oidc login state could not be claimed: %s: %s",
                        type(exc).__name__, exc)
            raise _Unrecorded from None

    try:
        claims = await client.finish(kept, dict(request.query), claim=claim)
    except _Unrecorded:
        return _page("Sign-in unavailable", "<p>The sign-in could not be checked (the store "
                     "did not answer). <a href=\"/auth/login\">Start again</a>.</p>", 503)
    except OidcError as exc:
        log.warning("oidc login refused: %s", exc)
        response = _page("Sign-in failed", f"<p>{html.escape(str(exc))}. "
                         "<a href=\"/auth/login\">Start again</a>.</p>", 401)
        response.del_cookie(LOGIN_COOKIE, path="/auth")
        return response
    who = client.principal(claims)
    target = safe_next(str(kept.get("next") or "/"))
    link = html.escape(target)
    response = _page("Signed in", f"<p>Signed in as {html.escape(who.name)}. "
                     f"<a id=\"next\" href=\"{link}\">Continue</a></p>",
                     headers={"Refresh": f"0; url={target}"})
    response.del_cookie(LOGIN_COOKIE, path="/auth")
    _start_session(request, response, principal=who.to_json())
    log.info("signed in %s", who.describe())
    return response


async def token_login(request: web.Request) -> web.StreamResponse:
    """`POST /ui/login` (form `token`, optional `next`): a session for a configured token."""
    if request.content_type != "application/x-www-form-urlencoded":
        fail(web.HTTPBadRequest, "send the token as an application/x-www-form-urlencoded form")
    form = await request.post()
    token = str(form.get("token") or "")
    tokens = request.app[SETTINGS].api_tokens
    if not tokens or known(tokens, token) is None:
        fail(web.HTTPUnauthorized, "unknown token")
    target = form.get("next")
    response: web.StreamResponse
    if isinstance(target, str) and target:
        response = web.HTTPSeeOther(safe_next(target))
    else:
        response = web.json_response({"ok": True})
    _start_session(request, response, token=token_digest(token))
    if isinstance(response, web.HTTPException):
        raise response
    return response


async def logout(request: web.Request) -> web.Response:
    """`POST /auth/logout`: the session ends (the cookie cleared, its id refused)."""
    session = None
    if request.cookies.get(SESSION_COOKIE):
        with contextlib.suppress(web.HTTPUnauthorized):  # expired or foreign: just clear it
            principal(request)
        session = request.get(SESSION)
        if session is not None:
            await check_csrf(request)
    if session is not None:
        now = time.time()
        backend = request.app[BACKEND]
        try:
            await backend.call(SignIns(backend.store).revoke, str(session["sid"]), now,
                               float(session["exp"]))
        except Exception as exc:  # the cookie stays, so signing out again can record it
            log.warning("logout could not be recorded: %s: %s", type(exc).__name__, exc)
            fail(web.HTTPServiceUnavailable, "not signed out: the store did not record the "
                                             "sign-out, retry")
        request.app[SESSIONS].revoke(session, now)
    response = _page("Signed out", "<p>Signed out. <a href=\"/auth/login\">Sign in</a></p>")
    response.del_cookie(SESSION_COOKIE, path="/")
    return response


async def whoami(request: web.Request) -> web.Response:
    """`GET /v1/whoami`: the caller's principal (and, for a browser session, its anti-CSRF
    token)."""
    who = principal(request)
    out = who.to_json()
    if token := csrf_token(request):
        out["csrf"] = token
    return reply(out)


ROUTES = [
    ("GET", "/auth/login", login_page),
    ("GET", "/auth/callback", callback),
    ("POST", "/auth/logout", logout),
    ("POST", "/ui/login", token_login),
    ("GET", "/v1/whoami", whoami),
]
