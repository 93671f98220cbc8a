"""Pieces every route shares: app keys, the caller's principal, JSON errors and bodies."""

from __future__ import annotations

import hmac
import json
from datetime import datetime
from typing import Any, NoReturn

from aiohttp import web

from jobtrail.auth import LOCAL, Principal
from jobtrail.config import Settings
from schemas.events import parse_time

SETTINGS: web.AppKey[Settings] = web.AppKey("settings", Settings)
BACKEND: web.AppKey[Any] = web.AppKey("backend", object)
ADAPTERS: web.AppKey[Any] = web.AppKey("adapters", dict)


def fail(status: type[web.HTTPException], message: str) -> NoReturn:
    raise status(text=json.dumps({"error": message}), content_type="application/json")


def principal(request: web.Request) -> Principal:
    """The caller: an operator when no tokens are configured; 401 for a missing or unknown
    token (compared in constant time)."""
    tokens = request.app[SETTINGS].api_tokens
    if not tokens:
        return LOCAL
    header = request.headers.get("Authorization", "")
    if not header and request.cookies.get("jobtrail_token"):  # the review page's cookie
        header = "Bearer " + request.cookies["jobtrail_token"]
    scheme, _, presented = header.partition(" ")
    found = known(tokens, presented) if scheme.lower() == "bearer" else None
    if found is None:
        fail(web.HTTPUnauthorized, "missing or unknown bearer token")
    return found


def known(tokens: dict[str, Any], presented: str) -> Principal | None:
    """The principal of a configured token (compared in constant time), else None."""
    offered = presented.strip().encode()
    if not offered:
        return None
    for token, grants in tokens.items():
        if hmac.compare_digest(token.encode(), offered):
            return Principal.from_grants(token, grants)
    return None


def query_time(request: web.Request, key: str) -> datetime | None:
    raw = request.query.get(key)
    if not raw:
        return None
    try:
        return parse_time(raw)
    except ValueError as exc:
        fail(web.HTTPBadRequest, f"{key}: {exc}")


def query_int(request: web.Request, key: str) -> int | None:
    raw = request.query.get(key) if key in request.query else request.match_info.get(key)
    if raw is None or raw == "":
        return None
    if not raw.isdigit() or len(raw) > 9:
        fail(web.HTTPBadRequest, f"{key} must be a non-negative integer")
    return int(raw)


def dumps(value: Any) -> str:
    return json.dumps(value, default=lambda v: v.isoformat() if isinstance(v, datetime)
                      else str(v))


def reply(value: Any, status: int = 200) -> web.Response:
    return web.json_response(value, status=status, dumps=dumps)
