"""Helpers every command group shares: the settings a command runs with, times from options."""

from __future__ import annotations

import math
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


class Finite(click.FloatRange):
    """A number option within bounds and finite: click's FloatRange lets NaN through (every
    comparison with it is false), and an infinity or 1e12 days overflows the report's dates
    long after the option was read."""

    name = "number"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


def count(low: int = 0, high: int = 10**9) -> click.IntRange:
    """A whole-number option within bounds (its name and range in the refusal)."""
    return click.IntRange(low, high)


def seconds(low: float = 0.0, high: float = 86400.0, *, low_open: bool = True) -> Finite:
    """A duration option in seconds: finite, above `low` (or at it, `low_open=False`)."""
    return Finite(low, high, min_open=low_open)
