"""Subscriptions, deliveries and the alerts loop over HTTP (docs/subscriptions.md).

Project-bound like every route: a token creates subscriptions bound to its projects (a
subset it names, or all of them) and sees only subscriptions bound within its projects;
nobody subscribes to what they cannot read. A token changes, deletes and test-sends only the
subscriptions it made (`created_by`); its silences cover its projects, never all. Channel
URLs are checked against the channel policy when they are given (`jobtrail.alerts.egress`)
and, with signing secrets, go to the secret store, never to the subscription record or a
response (the generated signing secret is returned once, when it is made).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from aiohttp import web

from jobtrail.http.common import BACKEND, SETTINGS, fail, reply
from jobtrail.http.guard import principal
from schemas.documents import load_json

log = logging.getLogger("jobtrail.alerts")
ALERTS: web.AppKey[Any] = web.AppKey("alerts", object)


def _parts(request: web.Request) -> tuple[Any, Any, Any]:
    from jobtrail.alerts.secrets import Secrets
    from jobtrail.alerts.store import AlertStore

    settings = request.app[SETTINGS]
    secrets = Secrets(settings.home, env_prefix=settings.channel_env_prefix)
    return AlertStore(request.app[BACKEND].store), secrets, settings


def _public(sub: Any) -> dict[str, Any]:
    out: dict[str, Any] = sub.model_dump(mode="json")
    out["channel"] = {"kind": sub.channel.kind, "hint": sub.channel.hint or sub.channel.target}
    return out


async def list_subscriptions(request: web.Request) -> web.Response:
    who = principal(request)
    alerts, _, _ = _parts(request)
    subs = await request.app[BACKEND].call(alerts.subscriptions, who.scope)
    return reply({"subscriptions": [_public(s) for s in subs]})


def _channel_fail(field: str, why: str) -> None:
    fail(web.HTTPUnprocessableEntity, f"{field}: {why}")


def _build(body: dict[str, Any], who: Any, secrets: Any, settings: Any) -> tuple[Any, str]:
    """The subscription a request describes, its channel checked now (a URL the policy
    refuses, a variable outside the channel prefix: 422 naming the field)."""
    from jobtrail.alerts import egress
    from jobtrail.alerts.secrets import env_refusal, hint, new_signing_secret
    from processors.notify.model import (
        CHANNELS,
        Creator,
        Matcher,
        Subscription,
        subscription_id,
    )

    name, owner = str(body.get("name") or ""), str(body.get("owner") or "")
    if not name or not owner:
        raise ValueError("name and owner: required")
    projects = body.get("projects") or []
    if not isinstance(projects, list) or not all(isinstance(p, str) for p in projects):
        raise ValueError("projects: a list of project names")
    wanted = list(projects)
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
    if kind not in CHANNELS:
        _channel_fail("channel.kind", f"one of {', '.join(CHANNELS)}")
    sub_id = subscription_id(owner, name, "" if who.operator else who.name)
    policy = egress.Policy.from_hosts(settings.alert_hosts)
    for key in ("url_env", "secret_env"):
        if channel.get(key):
            refused = env_refusal(str(channel[key]), secrets.env_prefix)
            if refused:
                _channel_fail(f"channel.{key}", refused)
    url = ""
    if kind == "email":
        target = shown = str(channel.get("to") or "")
    elif channel.get("url"):
        url = str(channel["url"])
    elif channel.get("url_env"):
        # the operator's variable: its URL is checked at every send, like every URL
        target, shown = f"env:{channel['url_env']}", f"${channel['url_env']}"
    else:
        raise ValueError("channel: url, url_env (or, for email, to) is required")
    if url:
        try:
            egress.check_url(url, policy)
        except egress.ChannelRefused as exc:
            _channel_fail("channel.url", str(exc))
    matchers = [Matcher.parse(str(m)) for m in body.get("matchers") or []]
    spec = {k: body[k] for k in ("on", "mode", "digest_cron", "timezone", "quiet",
                                 "rate_limit", "wait_s", "repeat_s", "max_repeats",
                                 "flap_hold_s", "history") if k in body}
    probe = {"kind": kind, "target": "secret:probe" if kind != "email" else target}
    Subscription.model_validate({  # everything else is valid before a secret is written
        **spec, "id": sub_id, "name": name, "owner": owner, "projects": wanted,
        "matchers": [m.model_dump() for m in matchers], "channel": probe})
    made_secret = ""
    if kind != "email" and channel.get("url"):
        target, shown = secrets.put(f"{sub_id}/url", url), hint(url)
    signing = ""
    if kind == "webhook":
        if channel.get("secret_env"):
            signing = f"env:{channel['secret_env']}"
        else:
            made_secret = new_signing_secret()
            signing = secrets.put(f"{sub_id}/signing", made_secret)
    sub = Subscription.model_validate({
        **spec, "id": sub_id, "name": name, "owner": owner, "projects": wanted,
        "matchers": [m.model_dump() for m in matchers],
        "channel": {"kind": kind, "target": target, "secret": signing, "hint": shown},
        "created_by": "" if who.operator else who.name, "creator": Creator.of(who).model_dump()})
    return sub, made_secret


async def create_subscription(request: web.Request) -> web.Response:
    """`POST /v1/subscriptions`: created or updated by (owner, name) within the caller's
    own subscriptions; 201 with it (and the webhook signing secret, once, when one was
    generated)."""
    from pydantic import ValidationError

    who = principal(request)
    alerts, secrets, settings = _parts(request)
    try:
        body = load_json(await request.read() or b"{}", what="the body")
        if not isinstance(body, dict):
            raise ValueError("the body must be a JSON object")
        existing = await request.app[BACKEND].call(
            alerts.subscription, _id_of(body, who), None)
        if existing is not None and not _may_change(existing[0], who):
            fail(web.HTTPForbidden, "a subscription of that name belongs to someone else")
        sub, made = _build(body, who, secrets, settings)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        fail(web.HTTPUnprocessableEntity, f"{where}: {first['msg']}")
    except ValueError as exc:
        fail(web.HTTPUnprocessableEntity, str(exc))
    except (TypeError, AttributeError) as exc:  # a value of the wrong JSON type somewhere
        fail(web.HTTPUnprocessableEntity, f"the body does not fit a subscription: {exc}")
    saved = await request.app[BACKEND].call(alerts.put_subscription, sub, who.name)
    out = _public(saved)
    if made:
        out["signing_secret"] = made
    return reply(out, status=201)


def _may_change(sub: Any, who: Any) -> bool:
    """An operator changes any subscription; a token only those it made itself, within its
    projects (never an operator's: those have no creator)."""
    if who.operator:
        return True
    return bool(sub.created_by) and sub.created_by == who.name and bool(sub.projects) and \
        set(sub.projects) <= who.projects


def _id_of(body: dict[str, Any], who: Any) -> str:
    from processors.notify.model import subscription_id

    return subscription_id(str(body.get("owner") or ""), str(body.get("name") or ""),
                           "" if who.operator else who.name)


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
    if not _may_change(sub, principal(request)):
        fail(web.HTTPForbidden, "only who made a subscription (or an operator) deletes it")
    alerts, _, _ = _parts(request)
    await request.app[BACKEND].call(alerts.delete_subscription, sub, principal(request).name)
    return reply({"deleted": sub.id})


async def test_subscription(request: web.Request) -> web.Response:
    """`POST /v1/subscriptions/{id}/test`: a test message over the channel, now. A refused
    host and one that does not answer (refused, timed out, unresolvable) give the same body,
    after the same wait (`alert_timeout_s`): the endpoint is no port scanner."""
    from dataclasses import asdict

    from jobtrail.alerts.worker import Deliverer

    sub = await _visible(request)
    if not _may_change(sub, principal(request)):
        fail(web.HTTPForbidden, "only who made a subscription (or an operator) tests it")
    alerts, secrets, settings = _parts(request)
    loop = asyncio.get_running_loop()
    started = loop.time()
    attempt = await request.app[BACKEND].call(
        lambda: Deliverer(alerts, secrets, settings).test_send(sub))
    if attempt.status != "test" and attempt.code == 0:
        await asyncio.sleep(max(0.0, settings.alert_timeout_s - (loop.time() - started)))
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


async def list_silences(request: web.Request) -> web.Response:
    who = principal(request)
    alerts, _, _ = _parts(request)
    found = await request.app[BACKEND].call(alerts.silences, who.scope)
    return reply({"silences": [s.model_dump(mode="json") for s in found]})


async def create_silence(request: web.Request) -> web.Response:
    """`POST /v1/silences` `{"matchers": [...], "ends": ISO or "for_s": N, "reason": ...,
    "projects": [...]}`: a token's silence covers only (some of) its projects' incidents;
    only an operator's covers every project. `by` is the caller, never a body field."""
    import hashlib

    from pydantic import ValidationError

    from processors.notify.model import Matcher, Silence, silence_length

    who = principal(request)
    alerts, _, _ = _parts(request)
    now = datetime.now(UTC)
    try:
        body = load_json(await request.read() or b"{}", what="the body")
        if not isinstance(body, dict):
            raise ValueError("the body must be a JSON object")
        if "for_s" in body:
            ends = now + silence_length(float(body["for_s"]))
        elif "ends" in body:
            ends = datetime.fromisoformat(str(body["ends"]))
            if ends.tzinfo is None:
                raise ValueError("ends: give a time zone (…Z or +HH:MM); a naive time is "
                                 "not taken as UTC")
            silence_length((ends - now).total_seconds())
        else:
            raise ValueError("ends or for_s: required")
        wanted = sorted({str(p) for p in body.get("projects") or []})
        if not who.operator:
            outside = sorted(set(wanted) - who.projects)
            if outside:
                fail(web.HTTPForbidden, f"projects: this token may not read "
                                        f"{', '.join(outside)}")
            wanted = wanted or sorted(who.projects)
            if not wanted:  # an empty list would silence nothing; never everything
                fail(web.HTTPForbidden, "this token reads no project to silence (only an "
                                        "operator silences across projects)")
        matchers = [Matcher.parse(str(m)) for m in body.get("matchers") or []]
        silence = Silence.model_validate({
            "id": "sil-" + hashlib.sha256(f"{who.name}{body}{now}".encode()).hexdigest()[:10],
            "matchers": [m.model_dump() for m in matchers], "starts": now, "ends": ends,
            "reason": str(body.get("reason") or ""), "by": who.name,
            "projects": wanted, "all_projects": who.operator and not wanted})
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
    deliverer = Deliverer(alerts, Secrets(settings.home, env_prefix=settings.channel_env_prefix),
                          settings)
    senders = ThreadPoolExecutor(max_workers=1, thread_name_prefix="alerts")

    cursor: list[datetime | None] = [None]  # the first pass decides over every log

    async def one_pass() -> None:
        now = datetime.now(UTC)
        await backend.call(decide_pass, alerts, now, cursor[0])
        cursor[0] = now - timedelta(seconds=settings.alerts_interval_s + 5)  # overlap
        jobs, cancelled = await backend.call(deliverer.prepare, now)
        loop = asyncio.get_running_loop()
        sent: list[Any] = []  # filled as each send ends: recorded even if the pass stops
        try:
            await loop.run_in_executor(senders, deliverer.deliver, jobs, now, sent)
        finally:
            await backend.call(deliverer.finish, list(sent), cancelled, now)

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
    ("GET", "/v1/silences", list_silences),
    ("POST", "/v1/silences", create_silence),
    ("GET", "/v1/deliveries", deliveries),
    ("POST", "/v1/notifications/{notification_id}/redeliver", redeliver),
]
