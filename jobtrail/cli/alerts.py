"""`jobtrail subscribe`, `subscriptions`, `silence`, `silences`, `notify`, `notifications`,
`deliveries` and `redeliver` (docs/subscriptions.md).

The CLI acts as an operator (like every CLI command): its subscriptions are bound to the
`--project`s given, or to none (every project). The listings take `--project` too, and then
show what a token of those projects would see (its subscriptions, their silences,
notifications and deliveries)."""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import click

from jobtrail.cli.common import _settings, _store, count, seconds


def _alerts(ctx: click.Context) -> Any:
    from jobtrail.alerts.store import AlertStore

    return AlertStore(_store(_settings(ctx)))


_SEEN_BY = click.option("--project", "seen_by", multiple=True,
                        help="Only what a token of these projects sees (repeatable); "
                             "default: everything")


def _scope(seen_by: tuple[str, ...]) -> list[str] | None:
    return sorted(set(seen_by)) or None


def _secrets(ctx: click.Context) -> Any:
    from jobtrail.alerts.secrets import Secrets

    settings = _settings(ctx)
    return Secrets(settings.home, env_prefix=settings.channel_env_prefix)


def _duration(text: str) -> timedelta:
    from processors.notify.model import silence_length

    m = re.fullmatch(r"(\d{1,12})([smhd])", text.strip())
    if not m:
        raise click.BadParameter(f"{text!r}: a duration like 90s, 30m, 2h or 1d",
                                 param_hint="--for")
    try:
        return silence_length(int(m[1]) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m[2]])
    except ValueError as exc:
        raise click.BadParameter(f"{text!r}: {exc}", param_hint="--for") from None


def _check_url(ctx: click.Context, option: str, url: str) -> None:
    from jobtrail.alerts import egress

    try:
        egress.check_url(url, egress.Policy.from_hosts(_settings(ctx).alert_hosts))
    except egress.ChannelRefused as exc:
        raise click.BadParameter(str(exc), param_hint=option) from None


def _check_env(secrets: Any, option: str, name: str) -> None:
    from jobtrail.alerts.secrets import env_refusal

    refused = env_refusal(name, secrets.env_prefix)
    if refused:
        raise click.BadParameter(refused, param_hint=option)


@click.command("subscribe")
@click.argument("name")
@click.option("--owner", required=True, help="The team (team:NAME) or person it belongs to")
@click.option("--match", "matchers", multiple=True,
              help="A label matcher: team=network, severity=~sev[12], project!=scratch "
                   "(all must match)")
@click.option("--on", "on", default="", help="Transitions, comma-separated (default: opened,"
              "cause_changed,severity_raised,owner_changed,recovery_failed,resolved,reopened)")
@click.option("--channel", type=click.Choice(["webhook", "slack", "mattermost", "teams",
                                              "email"]), required=True)
@click.option("--url", default="", help="The channel's URL (kept in HOME/secrets.json, "
                                        "never in the store)")
@click.option("--url-env", default="", help="...or the environment variable holding it")
@click.option("--to", "to", default="", help="The email address (email)")
@click.option("--secret-env", default="", help="Webhook: the variable holding the whsec_ "
                                               "signing secret(s), space-separated while rotating")
@click.option("--project", "projects", multiple=True, help="Only incidents of these projects")
@click.option("--digest", "cron", default="", help="Send a digest on this cron schedule "
                                                   "instead of immediately ('0 9 * * 1-5')")
@click.option("--tz", "zone", default="UTC", help="The subscriber's IANA time zone")
@click.option("--quiet", default="", help="Quiet hours HH:MM-HH:MM in --tz (may cross "
                                          "midnight)")
@click.option("--quiet-bypass", default="sev1", help="Severities that ignore quiet hours")
@click.option("--rate", default="20/3600", help="At most COUNT messages per SECONDS")
@click.option("--wait", "wait_s", type=count(0, 86400), default=30,
              help="Seconds the first message waits to fold cause and owner")
@click.option("--repeat", "repeat_s", type=count(0, 30 * 86400), default=1800,
              help="Repeat an unacknowledged sev1 every N seconds (0: never)")
@click.option("--flap-hold", "flap_hold_s", type=count(0, 86400), default=600)
@click.option("--history", is_flag=True,
              help="Also page incidents that were over before jobtrail saw them (a backfill, "
                   "a late import)")
@click.pass_context
def subscribe(ctx: click.Context, name: str, owner: str, matchers: tuple[str, ...], on: str,
              channel: str, url: str, url_env: str, to: str, secret_env: str,
              projects: tuple[str, ...], cron: str, zone: str, quiet: str, quiet_bypass: str,
              rate: str, wait_s: int, repeat_s: int, flap_hold_s: int,
              history: bool = False) -> None:
    """Subscribe OWNER to the incidents the matchers select (created or updated by name)."""
    from pydantic import ValidationError

    from jobtrail.alerts.secrets import hint, new_signing_secret
    from jobtrail.cli.commands import operator
    from processors.notify.model import Creator, Matcher, Subscription, subscription_id

    sub_id = subscription_id(owner, name)
    secrets = _secrets(ctx)
    shown_secret = ""
    try:
        parsed = [Matcher.parse(m) for m in matchers]
        if channel == "email":
            if not _settings(ctx).smtp:
                raise click.BadParameter(
                    "email needs a mail server (JOBTRAIL_SMTP=host:port): without one no "
                    "message would ever be delivered", param_hint="--channel")
            target, shown = to, to
        elif url:
            _check_url(ctx, "--url", url)
            target, shown = secrets.put(f"{sub_id}/url", url), hint(url)
        elif url_env:
            _check_env(secrets, "--url-env", url_env)
            if secrets.env.get(url_env):  # set here: the worker will read the same URL
                _check_url(ctx, "--url-env", secrets.env[url_env])
            else:
                click.echo(f"warning: {url_env} is not set here; the delivery worker must "
                           "have it, or this channel is never reached", err=True)
            target, shown = f"env:{url_env}", f"${url_env}"
        else:
            raise click.UsageError(f"--channel {channel} needs --url or --url-env")
        signing = ""
        if channel == "webhook":
            if secret_env:
                _check_env(secrets, "--secret-env", secret_env)
                signing = f"env:{secret_env}"
            else:
                shown_secret = new_signing_secret()
                signing = secrets.put(f"{sub_id}/signing", shown_secret)
        count, _, per = rate.partition("/")
        spec: dict[str, Any] = {
            "id": sub_id, "name": name, "owner": owner, "projects": list(projects),
            "matchers": [m.model_dump() for m in parsed],
            "channel": {"kind": channel, "target": target, "secret": signing, "hint": shown},
            "mode": "digest" if cron else "immediate", "digest_cron": cron, "timezone": zone,
            "rate_limit": {"count": int(count), "per_s": int(per or 3600)},
            "wait_s": wait_s, "repeat_s": repeat_s, "flap_hold_s": flap_hold_s,
            "creator": Creator.of(operator(_settings(ctx))).model_dump(), "history": history,
        }
        if on:
            spec["on"] = [t.strip() for t in on.split(",") if t.strip()]
        if quiet:
            start, _, end = quiet.partition("-")
            spec["quiet"] = {"start": start, "end": end,
                             "bypass": [s for s in quiet_bypass.split(",") if s]}
        sub = Subscription.model_validate(spec)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise click.ClickException(f"{where}: {first['msg']}") from None
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    saved = _alerts(ctx).put_subscription(sub, by="cli")
    click.echo(f"{saved.id} v{saved.version}: {owner} {name} -> {channel} {shown}")
    if shown_secret:
        click.echo(f"signing secret (shown once; verify webhook-signature with it): "
                   f"{shown_secret}")


def _row(sub: Any) -> str:
    state = "enabled" if sub.enabled else f"DISABLED ({sub.disabled_reason})"
    match = ", ".join(str(m) for m in sub.matchers) or "(everything)"
    mode = f"digest {sub.digest_cron} {sub.timezone}" if sub.mode == "digest" else "immediate"
    return (f"{sub.id} v{sub.version}  {sub.owner:18} {sub.name:20} {sub.channel.kind}:"
            f"{sub.channel.hint or sub.channel.target}  [{match}]  {mode}  {state}")


@click.group("subscriptions", invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True)
@_SEEN_BY
@click.pass_context
def subscriptions(ctx: click.Context, as_json: bool, seen_by: tuple[str, ...] = ()) -> None:
    """List subscriptions (and show, delete, enable, test one)."""
    if ctx.invoked_subcommand is not None:
        return
    subs = _alerts(ctx).subscriptions(_scope(seen_by))
    for sub in subs:
        click.echo(sub.model_dump_json() if as_json else _row(sub))
    if not subs and not as_json:
        click.echo("no subscriptions")


def _one(ctx: click.Context, sub_id: str) -> Any:
    found = _alerts(ctx).subscription(sub_id, None)
    if found is None:
        raise click.ClickException(f"no subscription {sub_id}")
    return found[0]


@subscriptions.command("show")
@click.argument("sub_id")
@click.pass_context
def show(ctx: click.Context, sub_id: str) -> None:
    click.echo(json.dumps(_one(ctx, sub_id).model_dump(mode="json"), indent=2))


@subscriptions.command("delete")
@click.argument("sub_id")
@click.pass_context
def delete(ctx: click.Context, sub_id: str) -> None:
    _alerts(ctx).delete_subscription(_one(ctx, sub_id), by="cli")
    click.echo(f"deleted {sub_id}")


@subscriptions.command("enable")
@click.argument("sub_id")
@click.pass_context
def enable(ctx: click.Context, sub_id: str) -> None:
    """Re-enable a subscription (after its endpoint answered 410 and was fixed)."""
    sub = _one(ctx, sub_id).model_copy(update={"enabled": True, "disabled_reason": ""})
    saved = _alerts(ctx).put_subscription(sub, by="cli")
    click.echo(f"enabled {sub_id} v{saved.version}")


@subscriptions.command("test")
@click.argument("sub_id")
@click.pass_context
def test_send(ctx: click.Context, sub_id: str) -> None:
    """Send a test message over the subscription's channel now."""
    from jobtrail.alerts.worker import Deliverer

    deliverer = Deliverer(_alerts(ctx), _secrets(ctx), _settings(ctx))
    attempt = deliverer.test_send(_one(ctx, sub_id))
    why = deliverer.last_detail or attempt.error  # the operator sees the full reason
    click.echo(f"{attempt.status} {attempt.code} in {attempt.latency_ms} ms"
               + (f": {why}" if attempt.status != "test" and why else ""))
    if attempt.status != "test":
        raise SystemExit(1)


@click.command("silence")
@click.argument("matchers", nargs=-1, required=True)
@click.option("--for", "length", default="", help="How long (2h, 30m, 1d)")
@click.option("--until", "until", default="", help="...or until (ISO 8601)")
@click.option("--reason", required=True)
@click.option("--by", default="cli")
@click.option("--project", "projects", multiple=True,
              help="Only these projects' incidents (default: every project)")
@click.pass_context
def silence(ctx: click.Context, matchers: tuple[str, ...], length: str, until: str, reason: str,
            by: str, projects: tuple[str, ...]) -> None:
    """Suppress matching notifications for a while (each suppression is logged). The CLI
    acts as an operator: without --project the silence covers every project."""
    import hashlib

    from ingest.redact import redact_text
    from processors.notify.model import Matcher, Silence, silence_length

    by = redact_text(by)  # free text, stored and listed
    now = datetime.now(UTC)
    if bool(length) == bool(until):
        raise click.UsageError("give --for or --until")
    try:
        if length:
            ends = now + _duration(length)
        else:
            ends = datetime.fromisoformat(until)
            if ends.tzinfo is None:
                raise ValueError(f"--until {until!r}: give a time zone (…Z or +HH:MM)")
            silence_length((ends - now).total_seconds())
        parsed = tuple(Matcher.parse(m) for m in matchers)
        sil = Silence(id="sil-" + hashlib.sha256(f"{matchers}{now}".encode()).hexdigest()[:10],
                      matchers=parsed, starts=now, ends=ends, reason=reason, by=by,
                      projects=tuple(sorted(set(projects))), all_projects=not projects)
    except (ValueError, OverflowError) as exc:
        raise click.ClickException(str(exc)) from None
    _alerts(ctx).put_silence(sil, by=by)
    click.echo(f"{sil.id}: {', '.join(str(m) for m in parsed)} until {ends.isoformat()}")


@click.command("silences")
@_SEEN_BY
@click.pass_context
def silences(ctx: click.Context, seen_by: tuple[str, ...] = ()) -> None:
    """List silences (active, pending and expired)."""
    now = datetime.now(UTC)
    for s in _alerts(ctx).silences(_scope(seen_by)):
        state = "active" if s.starts <= now < s.ends else "expired" if s.ends <= now \
            else "pending"
        click.echo(f"{s.id} {state:8} {', '.join(str(m) for m in s.matchers)} until "
                   f"{s.ends.isoformat()}: {s.reason}")


@click.command("notify")
@click.option("--once", is_flag=True, help="One decide and one delivery pass, then exit")
@click.option("--interval", type=seconds(0, 3600), default=5.0,
              help="Seconds between passes")
@click.option("--passes", type=count(0), default=0, help="Stop after N passes (0: run on)")
@click.option("--decide-only", is_flag=True, help="Write the outbox, deliver nothing")
@click.pass_context
def notify(ctx: click.Context, once: bool, interval: float, passes: int,
           decide_only: bool) -> None:
    """Decide notifications from the incident logs and deliver what is due."""
    from jobtrail.alerts.worker import Deliverer, decide_pass

    alerts = _alerts(ctx)
    deliverer = Deliverer(alerts, _secrets(ctx), _settings(ctx))
    done = 0
    since: datetime | None = None  # the first pass decides over every log
    while True:
        started = datetime.now(UTC)
        decided, written = decide_pass(alerts, started, since)
        since = started - timedelta(seconds=interval + 5)  # overlap: nothing falls between
        attempts = [] if decide_only else deliverer.run()
        counts: dict[str, int] = {}
        for a in attempts:
            counts[a.status] = counts.get(a.status, 0) + 1
        click.echo(f"decided {decided} ({written} new or changed); delivered: "
                   + (", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "nothing due"))
        done += 1
        if once or (passes and done >= passes):
            return
        time.sleep(interval)


@click.command("notifications")
@click.option("--subscription", default="")
@click.option("--status", default="", help="a decision (pending, suppressed) or what happened "
              "to it (delivered, retrying, gave_up, gone, cancelled)")
@click.option("--json", "as_json", is_flag=True)
@_SEEN_BY
@click.pass_context
def notifications(ctx: click.Context, subscription: str, status: str, as_json: bool,
                  seen_by: tuple[str, ...] = ()) -> None:
    """The outbox: every decision with what its deliveries did (delivered, retrying, gave
    up...) or why it was not sent."""
    alerts = _alerts(ctx)
    scope = _scope(seen_by)
    mine = None if scope is None else {sub.id for sub in alerts.subscriptions(scope)}
    for r in alerts.notifications(subscription=subscription, status=status):
        if mine is not None and r["subscription_id"] not in mine:
            continue
        if as_json:
            click.echo(json.dumps(r, default=str))
            continue
        click.echo(notification_line(r))


def notification_line(r: dict[str, Any]) -> str:
    """One outbox row as `notifications` prints it: its state from the delivery records."""
    tried = (f" [attempt {r['attempts']} at {r['last_attempt_at']:%H:%M:%S}]"
             if r.get("attempts") else "")
    return (f"{r['not_before']:%Y-%m-%d %H:%M:%S} {r['id']} {r['state']:10} "
            f"{r['incident_id']} {r['transition']:18} {r['subscription_id']}{tried}"
            + (f"  ({r['reason']})" if r["reason"] else ""))


@click.command("deliveries")
@click.option("--subscription", default="")
@click.option("--notification", default="")
@click.option("--json", "as_json", is_flag=True)
@_SEEN_BY
@click.pass_context
def deliveries(ctx: click.Context, subscription: str, notification: str, as_json: bool,
               seen_by: tuple[str, ...] = ()) -> None:
    """Every delivery attempt: status, response code, latency, next retry."""
    for r in _alerts(ctx).deliveries(_scope(seen_by), subscription=subscription,
                                     notification=notification):
        if as_json:
            click.echo(json.dumps(r, default=str))
            continue
        nxt = f" next {r['next_at']:%H:%M:%S}" if r["next_at"] else ""
        click.echo(f"{r['at']:%Y-%m-%d %H:%M:%S} {r['notification_id']} #{r['attempt']} "
                   f"{r['status']:9} {r['code']:3} {r['latency_ms']:5} ms {r['channel']}{nxt}"
                   + (f"  {r['error']}" if r["error"] else ""))


@click.command("redeliver")
@click.argument("notification_id")
@click.pass_context
def redeliver(ctx: click.Context, notification_id: str) -> None:
    """Send a notification again on the next pass (same webhook-id)."""
    alerts = _alerts(ctx)
    if not any(r["id"] == notification_id for r in alerts.notifications(limit=100000)):
        raise click.ClickException(f"no notification {notification_id}")
    alerts.reset(notification_id)
    click.echo(f"{notification_id} queued for redelivery")


COMMANDS = (subscribe, subscriptions, silence, silences, notify, notifications, deliveries,
            redeliver)
