"""How a person's CLI command becomes an incident command: who runs it (JOBTRAIL_IDENTITY or
the OS user, never a claimed name), when it happened (`--at`), its idempotency key, and the
runtime that applies or queues it: this process's, or, while `jobtrail serve` holds the
home, that server's, over its API (`jobtrail.cli.beside`)."""

from __future__ import annotations

import getpass
import uuid
from datetime import UTC, datetime
from typing import Any

import click

from jobtrail.cli.common import _settings


def operator(settings: Any) -> Any:
    """Who runs the CLI: `JOBTRAIL_IDENTITY` when configured, else the OS user."""
    from jobtrail.identity import cli_principal

    try:
        os_user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry for the uid (a container)
        os_user = ""
    return cli_principal(settings.identity, os_user)


def _command(ctx: click.Context, incident_id: str, command: str, by: str | None,
             data: dict[str, Any], command_id: str | None, at: datetime | None = None) -> None:
    from processors.incidents.model import Command, InvalidTransition

    settings = _settings(ctx)
    who = operator(settings)
    if by is not None and by != who.name:
        raise click.ClickException(
            f"--by {by}: the CLI records who runs it ({who.name}, {who.credential}), never "
            "a name given here; set JOBTRAIL_IDENTITY to the operator's configured identity")
    try:
        cmd = Command(command_id=command_id or f"cli-{uuid.uuid4().hex[:12]}",
                      incident_id=incident_id, command=command, actor=who.actor(),
                      time=datetime.now(UTC), data=data, at=at)
        cmd.payload()  # a bad field or an `at` still to come is refused before the runtime
    except InvalidTransition as exc:
        raise click.ClickException(f"{incident_id}: {exc}") from None
    from jobtrail.app import open_runtime
    from jobtrail.runtime.home import HomeInUse

    try:
        runtime = open_runtime(settings)
    except HomeInUse as exc:  # `serve` holds the home: the command goes through it
        from jobtrail.cli import beside

        served = beside.serving(settings.home, exc.holder)
        if served is None:
            raise
        events = beside.command(served, who, cmd)
    else:
        try:
            events = runtime.command(cmd)
        except InvalidTransition as exc:
            raise click.ClickException(f"{incident_id}: {exc}") from None
        finally:
            runtime.close()
    if events is None:
        click.echo(f"queued {command} {incident_id} as {cmd.command_id}")
        return
    if not events:
        click.echo(f"{cmd.command_id} was already applied")
    for event in events:
        click.echo(f"{incident_id} #{event.seq} {event.kind} by {event.actor.label()}")


_BY = click.option("--by", default=None, hidden=True,
                   help="Refused unless it names who runs the CLI (JOBTRAIL_IDENTITY or the "
                        "OS user): the log records the operator, not a claimed name")
_ID = click.option("--command-id", default=None, help="Idempotency key (default: random)")


def _when(_ctx: click.Context, _param: click.Parameter, value: str | None) -> datetime | None:
    """`--at`: an ISO time (UTC unless it says otherwise), or HH:MM today (UTC)."""
    if not value:
        return None
    try:
        if len(value) <= 5 and ":" in value:
            hour, minute = (int(x) for x in value.split(":"))
            return datetime.now(UTC).replace(hour=hour, minute=minute, second=0,
                                             microsecond=0)
        at = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise click.BadParameter(f"{value!r}: give an ISO time (2026-11-30T10:05Z) or HH:MM "
                                 "(UTC, today)") from None
    return at if at.tzinfo else at.replace(tzinfo=UTC)


_AT = click.option("--at", "at", default=None, callback=_when, metavar="TIME",
                   help="When it happened, if not now (ISO time, or HH:MM UTC today); the "
                        "log keeps when it was recorded too")
