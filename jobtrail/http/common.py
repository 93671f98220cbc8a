"""Pieces every route shares: app keys, JSON errors and bodies."""

from __future__ import annotations

import hmac
import json
from datetime import UTC, datetime
from typing import Any, NoReturn

from aiohttp import web

from jobtrail.config import Settings
from jobtrail.identity import Principal

SETTINGS: web.AppKey[Settings] = web.AppKey("settings", Settings)
BACKEND: web.AppKey[Any] = web.AppKey("backend", object)
ADAPTERS: web.AppKey[Any] = web.AppKey("adapters", dict)
PRINCIPAL: web.RequestKey[Principal] = web.RequestKey("principal", Principal)
AMBIENT: web.RequestKey[str] = web.RequestKey("ambient", str)
"""How the caller authenticated when it is ambient (a cookie or the proxy's header): the id
its anti-CSRF token derives from; '' for a bearer token or the open API."""
SESSION: web.RequestKey[dict[str, Any]] = web.RequestKey("session", dict)


def fail(status: type[web.HTTPException], message: str) -> NoReturn:
    raise status(text=json.dumps({"error": message}), content_type="application/json")


def known(tokens: dict[str, Any], presented: str) -> Principal | None:
    """The principal of a configured token (compared in constant time), else None."""
    offered = presented.strip().encode()
    if not offered:
        return None
    found = None
    for token, grants in tokens.items():
        if hmac.compare_digest(token.encode(), offered):
            found = Principal.from_grants(token, grants)
    return found


def query_time(request: web.Request, key: str) -> datetime | None:
    """A time parameter: an RFC 3339 date-time (ISO 8601 with a zone: `Z`, `+02:00`). A time
    without a zone is refused (400 naming it) rather than silently taken as UTC; one outside
    1970..2200 is clamped to it (the store's range: `since=0001-...` means all)."""
    raw = request.query.get(key)
    if raw is None:
        return None
    text = raw.strip().upper()
    if len(text) > 64:
        fail(web.HTTPBadRequest, f"{key}: not an ISO 8601 date-time")
    if text[17:20] == "60" and text[16:17] == ":":  # a leap second (RFC 3339 allows it)
        text = text[:17] + "59" + text[19:]
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        fail(web.HTTPBadRequest, f"{key}: {raw[:40]!r} is not an ISO 8601 date-time")
    if parsed.tzinfo is None:
        fail(web.HTTPBadRequest, f"{key}: {raw[:40]!r} has no time zone; add Z or an offset "
                                 "(+02:00)")
    try:
        moment = parsed.astimezone(UTC)
    except OverflowError:  # year 1 or 9999 shifted by its offset
        moment = _EARLIEST if parsed.year < 1970 else _LATEST
    return min(max(moment, _EARLIEST), _LATEST).replace(
        microsecond=moment.microsecond // 1000 * 1000)


_EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
_LATEST = datetime(2200, 12, 31, 23, 59, 59, tzinfo=UTC)


def query_enum(request: web.Request, key: str, allowed: tuple[str, ...]) -> str:
    """A parameter with a closed set of values ('' when absent; 400 naming them else)."""
    raw = request.query.get(key)
    if raw is None:
        return ""
    if raw not in allowed:
        fail(web.HTTPBadRequest, f"{key} must be one of {', '.join(allowed)}")
    return raw


def query_int(request: web.Request, key: str) -> int | None:
    raw = request.query.get(key) if key in request.query else request.match_info.get(key)
    if raw is None:
        return None
    if not raw.isdigit() or len(raw) > 9:  # present but empty is a bad value, not absent
        fail(web.HTTPBadRequest, f"{key} must be a non-negative integer")
    return int(raw)


def dumps(value: Any) -> str:
    return json.dumps(value, default=lambda v: v.isoformat() if isinstance(v, datetime)
                      else str(v))


def reply(value: Any, status: int = 200) -> web.Response:
    return web.json_response(value, status=status, dumps=dumps)
