"""Authentication, roles and the CSRF defence, in front of every route.

Who is asking (`authenticate`), in this order:
0. the operator's CLI on this host, beside this server (`jobtrail.http.beside`: the key
   `serve` wrote into the home for this run, from a loopback peer);
1. `Authorization: Bearer <token>`: a configured API token (not ambient: a browser never
   adds it to a cross-site request by itself);
2. the trusted auth proxy's user header (`JOBTRAIL_AUTH_PROXY_HEADER`), accepted only when
   the TCP peer is one of `JOBTRAIL_AUTH_PROXY_ADDRESSES`; from any other address the header
   is refused with 401, never ignored into another identity;
3. the signed session cookie (`jobtrail_session`), set by an OpenID Connect login or by a
   token presented to `POST /ui/login`;
4. nothing: the local operator when no credential of any kind is configured, else 401.

`guard`, the middleware in front of every route, then:
- refuses any state-changing request (POST, PUT, PATCH, DELETE, whatever the route) that an
  ambient credential would authenticate (the cookie, the proxy's header; no bearer token), or
  that signs in (`POST /ui/login`), unless it comes from this site: an `Origin` of this server
  or `JOBTRAIL_PUBLIC_URL`, or, without an Origin, a `Referer` of one (403 saying what it saw);
- checks a session cookie against the logouts in the store (`jobtrail.identity.ledger`: a
  restart or another process's logout counts), except on routes that never read the caller
  (`ANONYMOUS_READS`: the probes do no store I/O for a cookie);
- checks a state-changing route's least role (`jobtrail.identity.roles`; a route without a
  policy is refused) and, for an ambient credential, the page's anti-CSRF token in
  `X-Jobtrail-CSRF` (or a `csrf` form field). A same-site form on a sibling host sends the
  cookie but can neither match the origin nor know the token.

The auth proxy's identity headers (user, teams, projects, role) must each appear at most once:
a repeated one is refused (400 naming it), never resolved to one of its values.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import time
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from jobtrail.http import beside
from jobtrail.http.common import AMBIENT, BACKEND, PRINCIPAL, SESSION, SETTINGS, fail, known
from jobtrail.identity import LOCAL, ROLES, Principal
from jobtrail.identity.ledger import SignIns
from jobtrail.identity.roles import (
    ANONYMOUS_READS,
    ROUTE_ROLES,
    SIGN_IN_ROUTES,
    UNAUTHENTICATED_WRITES,
)
from jobtrail.identity.session import CSRF_HEADER, SESSION_COOKIE, Sessions, token_digest

log = logging.getLogger("jobtrail.identity")
SESSIONS: web.AppKey[Sessions] = web.AppKey("sessions", Sessions)
CHECKED: web.RequestKey[str] = web.RequestKey("checked_session", str)
"""The id of the request's session once the store said it was not logged out."""
SAFE = frozenset({"GET", "HEAD", "OPTIONS"})


def authenticate(request: web.Request) -> Principal:
    """The caller, remembered on the request with how it authenticated (`ambient`: the id
    its anti-CSRF token derives from, '' for a bearer token)."""
    settings = request.app[SETTINGS]
    found, ambient = _credential(request, settings)
    request[PRINCIPAL], request[AMBIENT] = found, ambient
    return found


def principal(request: web.Request) -> Principal:
    """The caller (`authenticate`): an operator when no credential is
    configured; 401 for a missing, unknown or untrusted one."""
    found = request.get(PRINCIPAL)
    return found if found is not None else authenticate(request)


def _credential(request: web.Request, settings: Any) -> tuple[Principal, str]:
    _refuse_repeated_proxy_headers(request, settings)
    home_key = request.headers.get(beside.KEY_HEADER)
    if home_key is not None:  # the CLI beside this server, on its host (`http.beside`)
        return beside.operator(request, home_key), ""
    header = request.headers.get("Authorization", "")
    if header and settings.authenticated:
        scheme, _, presented = header.partition(" ")
        found = known(settings.api_tokens, presented) if scheme.lower() == "bearer" else None
        if found is None:
            fail(web.HTTPUnauthorized, "missing or unknown bearer token")
        return found, ""
    proxy = settings.auth_proxy_header
    if proxy and proxy in request.headers:
        if not _trusted_proxy(request.remote or "", settings.auth_proxy_addresses):
            fail(web.HTTPUnauthorized, f"the {proxy} header is accepted only from the "
                                       "configured auth proxy")
        who = _proxy_principal(request, settings)
        return who, f"proxy:{who.name}"
    cookie = request.cookies.get(SESSION_COOKIE)
    if cookie:
        session = request.app[SESSIONS].open("session", cookie, time.time())
        # a session counts only once the store said it was not logged out (`guard`)
        if session is not None and request.get(CHECKED) == str(session.get("sid")):
            held = _session_principal(session, settings)
            if held is not None:
                request[SESSION] = session
                return held, f"session:{session['sid']}"
    if not settings.authenticated:
        return LOCAL, ""
    fail(web.HTTPUnauthorized, "sign in (/auth/login) or send a bearer token")


def _trusted_proxy(remote: str, networks: tuple[str, ...]) -> bool:
    try:
        address = ipaddress.ip_address(remote)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped
    return any(address in ipaddress.ip_network(n, strict=False) for n in networks)


def _refuse_repeated_proxy_headers(request: web.Request, settings: Any) -> None:
    """400 for a request carrying one of the auth proxy's identity headers more than once
    (in any spelling of its name): a proxy that adds its value to the client's copy would
    otherwise let the client's speak for it, so none of the values is taken."""
    if not settings.auth_proxy_header:
        return
    for header in (settings.auth_proxy_header, settings.auth_proxy_teams_header,
                   settings.auth_proxy_projects_header, settings.auth_proxy_role_header):
        if header and (times := len(request.headers.getall(header, ()))) > 1:
            fail(web.HTTPBadRequest, f"the {header} header appears {times} times: the auth "
                                     "proxy's identity headers must each appear once (the "
                                     "proxy must replace a client's copy, not add to it)")


def _proxy_principal(request: web.Request, settings: Any) -> Principal:
    h = request.headers
    name = h[settings.auth_proxy_header].strip()[:200]
    if not name:
        fail(web.HTTPUnauthorized, f"the {settings.auth_proxy_header} header is empty")

    def listed(header: str) -> set[str]:
        return {v.strip() for v in h.get(header, "").split(",") if v.strip()} if header \
            else set()

    projects = listed(settings.auth_proxy_projects_header)
    roles = [r for r in listed(settings.auth_proxy_role_header) if r in ROLES]
    return Principal(name, frozenset(projects - {"*"}), operator="*" in projects,
                     role=max(roles, key=ROLES.index) if roles
                     else settings.auth_proxy_default_role, kind="person",
                     teams=frozenset(listed(settings.auth_proxy_teams_header)),
                     credential="proxy")


def _session_principal(session: dict[str, Any], settings: Any) -> Principal | None:
    if "token" in session:  # a token login: the token must still be configured
        for token, grants in settings.api_tokens.items():
            if hmac.compare_digest(token_digest(token), str(session["token"])):
                return Principal.from_grants(token, grants)
        return None
    if isinstance(session.get("principal"), dict):
        return Principal.from_json(session["principal"])
    return None


def require(request: web.Request, role: str, what: str) -> Principal:
    """The caller, when its role is at least `role` (403 saying who it is otherwise)."""
    who = request.get(PRINCIPAL) or authenticate(request)
    if not who.allows(role):
        fail(web.HTTPForbidden, f"{what} needs the {role} role; {who.describe()} is a "
                                f"{who.role}")
    return who


def _sender(request: web.Request) -> tuple[str, str]:
    """The origin a request says it comes from, and which header said it ('' if none)."""
    origin = request.headers.get("Origin") or ""
    if origin and origin != "null":
        return origin, "Origin"
    referer = urlsplit(request.headers.get("Referer") or "")
    if referer.scheme and referer.netloc:
        return f"{referer.scheme}://{referer.netloc}", "Referer"
    return "", ""


def same_origin(request: web.Request) -> bool:
    """Whether the request's Origin (or, without one, its Referer) is this server's or the
    public URL's."""
    settings = request.app[SETTINGS]
    origin, _ = _sender(request)
    public = urlsplit(settings.public_url)
    allowed = {f"{request.scheme}://{request.host}", f"{public.scheme}://{public.netloc}"}
    return bool(origin) and origin in allowed


def _ambient(request: web.Request) -> bool:
    """Whether a credential the browser adds by itself (the session cookie, the auth proxy's
    identity) would authenticate this request: no bearer token is presented."""
    settings = request.app[SETTINGS]
    if not settings.authenticated or request.headers.get("Authorization"):
        return False
    proxy = settings.auth_proxy_header
    return SESSION_COOKIE in request.cookies or bool(proxy and proxy in request.headers)


def refuse_cross_site(request: web.Request) -> None:
    """403 for a state-changing request an ambient credential would authenticate (or a
    sign-in) that does not come from this site, saying what it came with."""
    if same_origin(request):
        return
    origin, header = _sender(request)
    seen = f"its {header} is {origin[:200]!r}" if origin else \
        "it has neither an Origin nor a Referer"
    if header == "Referer":
        seen = f"it has no Origin and {seen}"
    fail(web.HTTPForbidden, "cross-origin request refused: a change signed in by cookie or "
                            "auth proxy, or a sign-in, must come from this site's pages (an "
                            "Origin of this server or JOBTRAIL_PUBLIC_URL "
                            f"{request.app[SETTINGS].public_url}, or without an Origin a "
                            f"Referer of one); {seen}")


async def check_session(request: web.Request) -> None:
    """Mark the request's session cookie as checked when the store has no logout of it (a
    logout seen here is remembered; a store that does not answer is a 503, never a pass)."""
    settings = request.app[SETTINGS]
    cookie = request.cookies.get(SESSION_COOKIE)
    if not cookie or not settings.authenticated or request.headers.get("Authorization") or (
            settings.auth_proxy_header and settings.auth_proxy_header in request.headers):
        return  # no cookie, or another credential wins
    sessions = request.app[SESSIONS]
    now = time.time()
    session = sessions.open("session", cookie, now)
    if session is None:
        return  # expired, foreign, or logged out as this process knows
    backend = request.app[BACKEND]
    try:
        revoked = await backend.call(SignIns(backend.store).revoked, str(session["sid"]))
    except Exception as exc:
        log.warning("session check failed: %s: %s", type(exc).__name__, exc)
        raise web.HTTPServiceUnavailable(
            text=json.dumps({"error": "could not check this session against the store's "
                                      f"sign-outs, retry: {type(exc).__name__}"}),
            content_type="application/json", headers={"Retry-After": "5"}) from None
    if revoked:
        sessions.revoke(session, now)
    else:
        request[CHECKED] = str(session["sid"])


async def check_csrf(request: web.Request) -> None:
    """Refuse an ambient-credential change that is cross-origin or lacks the page's token."""
    ambient = request.get(AMBIENT) or ""
    if not ambient:
        return
    if not same_origin(request):
        fail(web.HTTPForbidden, "cross-origin request refused: a change signed in by cookie "
                                "or auth proxy must come from this site's pages (Origin)")
    given = request.headers.get(CSRF_HEADER, "")
    if not given and request.content_type == "application/x-www-form-urlencoded":
        given = str((await request.post()).get("csrf") or "")
    expected = request.app[SESSIONS].csrf(ambient)
    if not hmac.compare_digest(given.encode(), expected.encode()):
        fail(web.HTTPForbidden, f"a change signed in by cookie or auth proxy needs the page's "
                                f"anti-CSRF token ({CSRF_HEADER})")


def csrf_token(request: web.Request) -> str:
    """The anti-CSRF token a page served to this caller carries ('' for a bearer token)."""
    ambient = request.get(AMBIENT) or ""
    return request.app[SESSIONS].csrf(ambient) if ambient else ""


@web.middleware
async def guard(request: web.Request, handler: Any) -> web.StreamResponse:
    """The site check, the session's logout check, roles and the anti-CSRF token on every
    state-changing route (deny by default)."""
    resource = request.match_info.route.resource
    if resource is None:  # no such route: the router's own 404/405
        return await handler(request)  # type: ignore[no-any-return]
    key = (request.method, resource.canonical)
    if request.method not in SAFE and (key in SIGN_IN_ROUTES or _ambient(request)):
        refuse_cross_site(request)
    if key not in ANONYMOUS_READS:
        await check_session(request)
    if request.method in SAFE or key in UNAUTHENTICATED_WRITES:
        return await handler(request)  # type: ignore[no-any-return]
    need = ROUTE_ROLES.get(key)
    if need is None:
        fail(web.HTTPForbidden, f"{key[0]} {key[1]} has no role policy (refused)")
    authenticate(request)
    await check_csrf(request)
    require(request, need, f"{key[0]} {key[1]}")
    return await handler(request)  # type: ignore[no-any-return]
