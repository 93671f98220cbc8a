"""Helpers every command group shares: the settings a command runs with, times from options."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import click

from jobtrail.config import Settings


def _settings(ctx: click.Context) -> Settings:
    return ctx.obj  # type: ignore[no-any-return]


def _store(settings: Settings) -> Any:
    """The store a command reads or writes (the embedded engine after the home lock)."""
    from jobtrail.app import open_store

    return open_store(settings)


def _parse_when(value: str | None) -> datetime | None:
    if not value:
        return None
    from schemas.events import parse_time

    try:
        return parse_time(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
