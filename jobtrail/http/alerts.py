"""Subscriptions, deliveries and the alerts loop over HTTP (docs/subscriptions.md).

Project-bound like every route: a token creates subscriptions bound to its projects (a
subset it names, or all of them) and sees only subscriptions bound within its projects;
nobody subscribes to what they cannot read. Channel URLs and signing secrets go to the
secret store, never to the subscription record or a response (the generated signing secret
is returned once, when it is made).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from aiohttp import web

from jobtrail.http.common import BACKEND, SETTINGS, fail, principal, reply
from schemas.documents import load_json

log = logging.getLogger("jobtrail.alerts")
ALERTS: web.AppKey[Any] = web.AppKey("alerts", object)


def _parts(request: web.Request) -> tuple[Any, Any, Any]:
    from jobtrail.alerts.secrets import Secrets
    from jobtrail.alerts.store import AlertStore

    settings = request.app[SETTINGS]
    return AlertStore(request.app[BACKEND].store), Secrets(settings.home), settings


def _public(sub: Any) -> dict[str, Any]:
    out: dict[str, Any] = sub.model_dump(mode="json")
    out["channel"] = {"kind": sub.channel.kind, "hint": sub.channel.hint or sub.channel.target}
    return out


async def list_subscriptions(request: web.Request) -> web.Response:
    who = principal(request)
    alerts, _, _ = _parts(request)
    subs = await request.app[BACKEND].call(alerts.subscriptions, who.scope)
    return reply({"subscriptions": [_public(s) for s in subs]})


def _build(body: dict[str, Any], who: Any, secrets: Any) -> tuple[Any, str]:
    from jobtrail.alerts.secrets import hint, new_signing_secret
    from processors.notify.model import Matcher, Subscription, subscription_id

    name, owner = str(body.get("name") or ""), str(body.get("owner") or "")
    if not name or not owner:
        raise ValueError("name and owner: required")
    wanted = [str(p) for p in body.get("projects") or []]
    if not who.operator:
        outside = sorted(set(wanted) - who.projects)
        if outside:
            fail(web.HTTPForbidden, f"projects: this token may not read {', '.join(outside)}")
        wanted = wanted or sorted(who.projects)
        if not wanted:
            fail(web.HTTPForbidden, "this token reads no project to subscribe to")
    channel = body.get("channel")
    if not isinstance(channel, dict):
        raise ValueError("channel: an object with kind and url, url_env or to")
    kind = str(channel.get("kind") or "")
    sub_id = subscription_id(owner, name)
    made_secret = ""
    if kind == "email":
        target, shown = str(channel.get("to") or ""), str(channel.get("to") or "")
    elif channel.get("url"):
        url = str(channel["url"])
        if not url.startswith(("https://", "http://")):
            raise ValueError("channel.url: an http(s) URL")
        target, shown = secrets.put(f"{sub_id}/url", url), hint(url)
    elif channel.get("url_env"):
        target, shown = f"env:{channel['url_env']}", f"${channel['url_env']}"
    else:
        raise ValueError("channel: url, url_env (or, for email, to) is required")
    signing = ""
    if kind == "webhook":
        if channel.get("secret_env"):
            signing = f"env:{channel['secret_env']}"
        else:
            made_secret = new_signing_secret()
            signing = secrets.put(f"{sub_id}/signing", made_secret)
    matchers = [Matcher.parse(str(m)) for m in body.get("matchers") or []]
    spec = {k: body[k] for k in ("on", "mode", "digest_cron", "timezone", "quiet",
                                 "rate_limit", "wait_s", "repeat_s", "max_repeats",
                                 "flap_hold_s") if k in body}
    sub = Subscription.model_validate({
        **spec, "id": sub_id, "name": name, "owner": owner, "projects": wanted,
        "matchers": [m.model_dump() for m in matchers],
        "channel": {"kind": kind, "target": target, "secret": signing, "hint": shown}})
    return sub, made_secret


async def create_subscription(request: web.Request) -> web.Response:
    """`POST /v1/subscriptions`: created or updated by (owner, name); 201 with it (and the
    webhook signing secret, once, when one was generated)."""
    from pydantic import ValidationError

    who = principal(request)
    alerts, secrets, _ = _parts(request)
    try:
        body = load_json(await request.read() or b"{}", what="the body")
        if not isinstance(body, dict):
            raise ValueError("the body must be a JSON object")
        existing = await request.app[BACKEND].call(
            alerts.subscription, _id_of(body), None)
        if existing is not None and not who.operator and not set(existing[0].projects) <= \
                who.projects:
            fail(web.HTTPForbidden, "a subscription of that name belongs to other projects")
        sub, made = _build(body, who, secrets)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        fail(web.HTTPUnprocessableEntity, f"{where}: {first['msg']}")
    except ValueError as exc:
        fail(web.HTTPUnprocessableEntity, str(exc))
    saved = await request.app[BACKEND].call(alerts.put_subscription, sub, who.name)
    out = _public(saved)
    if made:
        out["signing_secret"] = made
    return reply(out, status=201)


def _id_of(body: dict[str, Any]) -> str:
    from processors.notify.model import subscription_id

    return subscription_id(str(body.get("owner") or ""), str(body.get("name") or ""))


async def _visible(request: web.Request) -> Any:
    who = principal(request)
    alerts, _, _ = _parts(request)
    found = await request.app[BACKEND].call(alerts.subscription,
                                            request.match_info["sub_id"], who.scope)
    if found is None:
        fail(web.HTTPNotFound, "no such subscription")
    return found[0]


async def show_subscription(request: web.Request) -> web.Response:
    return reply(_public(await _visible(request)))


async def delete_subscription(request: web.Request) -> web.Response:
    sub = await _visible(request)
    alerts, _, _ = _parts(request)
    await request.app[BACKEND].call(alerts.delete_subscription, sub, principal(request).name)
    return reply({"deleted": sub.id})


async def test_subscription(request: web.Request) -> web.Response:
    """`POST /v1/subscriptions/{id}/test`: a test message over the channel, now."""
    from dataclasses import asdict

    from jobtrail.alerts.worker import Deliverer

    sub = await _visible(request)
    alerts, secrets, settings = _parts(request)
    attempt = await request.app[BACKEND].call(
        lambda: Deliverer(alerts, secrets, settings).test_send(sub))
    return reply(asdict(attempt), status=200 if attempt.status == "test" else 502)


async def deliveries(request: web.Request) -> web.Response:
    who = principal(request)
    alerts, _, _ = _parts(request)
    rows = await request.app[BACKEND].call(
        alerts.deliveries, who.scope, subscription=request.query.get("subscription", ""),
        notification=request.query.get("notification", ""))
    return reply({"deliveries": rows})


async def redeliver(request: web.Request) -> web.Response:
    who = principal(request)
    alerts, _, _ = _parts(request)
    notification = request.match_info["notification_id"]
    rows = await request.app[BACKEND].call(lambda: [
        r for r in alerts.notifications(limit=100000) if r["id"] == notification])
    if not rows:
        fail(web.HTTPNotFound, "no such notification")
    visible = await request.app[BACKEND].call(alerts.subscription, rows[0]["subscription_id"],
                                              who.scope)
    if visible is None:
        fail(web.HTTPNotFound, "no such notification")
    await request.app[BACKEND].call(alerts.reset, notification)
    return reply({"queued": notification}, status=202)


async def unsubscribe(request: web.Request) -> web.Response:
    """The email's List-Unsubscribe target (RFC 8058 one-click: POST; GET shows a form's
    worth of confirmation). Authenticated by the HMAC token in the link, not a bearer."""
    from jobtrail.alerts.worker import unsubscribe_token

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


async def list_silences(request: web.Request) -> web.Response:
    who = principal(request)
    alerts, _, _ = _parts(request)
    found = await request.app[BACKEND].call(alerts.silences, who.scope)
    return reply({"silences": [s.model_dump(mode="json") for s in found]})


async def create_silence(request: web.Request) -> web.Response:
    """`POST /v1/silences` `{"matchers": [...], "ends": ISO or "for_s": N, "reason": ...}`:
    a token's silence covers only its projects' incidents."""
    import hashlib

    from pydantic import ValidationError

    from processors.notify.model import Matcher, Silence

    who = principal(request)
    alerts, _, _ = _parts(request)
    now = datetime.now(UTC)
    try:
        body = load_json(await request.read() or b"{}", what="the body")
        if not isinstance(body, dict):
            raise ValueError("the body must be a JSON object")
        if "for_s" in body:
            ends = now + timedelta(seconds=float(body["for_s"]))
        elif "ends" in body:
            ends = datetime.fromisoformat(str(body["ends"]))
        else:
            raise ValueError("ends or for_s: required")
        matchers = [Matcher.parse(str(m)) for m in body.get("matchers") or []]
        silence = Silence.model_validate({
            "id": "sil-" + hashlib.sha256(f"{who.name}{body}{now}".encode()).hexdigest()[:10],
            "matchers": [m.model_dump() for m in matchers], "starts": now, "ends": ends,
            "reason": str(body.get("reason") or ""), "by": str(body.get("by") or who.name),
            "projects": [] if who.operator else sorted(who.projects)})
    except ValidationError as exc:
        first = exc.errors()[0]
        fail(web.HTTPUnprocessableEntity,
             f"{'.'.join(str(x) for x in first['loc'])}: {first['msg']}")
    except (ValueError, TypeError, OverflowError) as exc:
        fail(web.HTTPUnprocessableEntity, str(exc))
    await request.app[BACKEND].call(alerts.put_silence, silence, who.name)
    return reply(silence.model_dump(mode="json"), status=201)


# --- the loop `jobtrail serve` runs (embedded mode) ---------------------------------------


async def alerts_loop(app: web.Application) -> Any:
    """Decide and deliver every `alerts_interval_s` (store work on the runtime's thread,
    sends on their own, so a slow endpoint never holds up ingest)."""
    from concurrent.futures import ThreadPoolExecutor

    from jobtrail.alerts.secrets import Secrets
    from jobtrail.alerts.store import AlertStore
    from jobtrail.alerts.worker import Deliverer, decide_pass

    settings = app[SETTINGS]
    if settings.alerts_interval_s <= 0 or settings.cluster_mode:
        yield
        return
    backend = app[BACKEND]
    alerts = AlertStore(backend.store)
    deliverer = Deliverer(alerts, Secrets(settings.home), settings)
    senders = ThreadPoolExecutor(max_workers=1, thread_name_prefix="alerts")

    cursor: list[datetime | None] = [None]  # the first pass decides over every log

    async def one_pass() -> None:
        now = datetime.now(UTC)
        await backend.call(decide_pass, alerts, now, cursor[0])
        cursor[0] = now - timedelta(seconds=settings.alerts_interval_s + 5)  # overlap
        jobs, cancelled = await backend.call(deliverer.prepare, now)
        loop = asyncio.get_running_loop()
        sent = await loop.run_in_executor(senders, deliverer.deliver, jobs, now)
        await backend.call(deliverer.finish, sent, cancelled, now)

    async def run() -> None:
        while True:
            try:
                await one_pass()
            except Exception:
                log.exception("alerts pass failed (retried next interval)")
            await asyncio.sleep(settings.alerts_interval_s)

    task = asyncio.create_task(run())
    app[ALERTS] = task
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    senders.shutdown(wait=False)


ROUTES = [
    ("GET", "/v1/subscriptions", list_subscriptions),
    ("POST", "/v1/subscriptions", create_subscription),
    ("GET", "/v1/subscriptions/{sub_id}", show_subscription),
    ("DELETE", "/v1/subscriptions/{sub_id}", delete_subscription),
    ("POST", "/v1/subscriptions/{sub_id}/test", test_subscription),
    ("GET", "/v1/subscriptions/{sub_id}/unsubscribe", unsubscribe),
    ("POST", "/v1/subscriptions/{sub_id}/unsubscribe", unsubscribe),
    ("GET", "/v1/silences", list_silences),
    ("POST", "/v1/silences", create_silence),
    ("GET", "/v1/deliveries", deliveries),
    ("POST", "/v1/notifications/{notification_id}/redeliver", redeliver),
]
