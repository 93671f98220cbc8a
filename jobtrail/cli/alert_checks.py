"""What the alert commands check of what they are given: a silence's duration, a channel's
URL against the egress policy, the variable a secret is read from (`jobtrail.cli.alerts`)."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import click

from jobtrail.cli.common import _settings


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
