"""How a postmortem writes values: Markdown escaping (only what CommonMark would read as
markup), times, durations, GPU-hours, and natural ordering of names like rank-8 < rank-16."""

from __future__ import annotations

import re
from datetime import datetime

_MD_SPECIAL = str.maketrans({c: "\\" + c for c in "\\`*[]<>|~"})
_LOOSE_UNDERSCORE = re.compile(r"(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")
_LINE_START = re.compile(r"^([#+\-=])")
_LIST_START = re.compile(r"^(\d+)([.)])")
_ENTITY = re.compile(r"&(?=#?\w+;)")


def esc(text: object, limit: int = 300) -> str:
    """Untrusted text as literal Markdown on one line, escaped only where CommonMark would
    read markup: `port_down` and `(seen on node-001)` stay as they are; `*`, a backtick,
    brackets, `<`, `|`, `~` and an `_` at a word's edge are escaped, and so is what would
    start a block (`#`, `-`, `1.`) at the start."""
    flat = " ".join(str(text).split())
    if len(flat) > limit:
        flat = flat[:limit - 1] + "…"
    flat = _LOOSE_UNDERSCORE.sub(r"\\_", flat.translate(_MD_SPECIAL))
    flat = _ENTITY.sub(r"\\&", flat)
    return _LIST_START.sub(r"\1\\\2", _LINE_START.sub(r"\\\1", flat))


def _natural(text: str) -> list[object]:
    """`rank-2` before `rank-10`: digits compare as numbers."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def hhmm(value: datetime | None) -> str:
    return value.strftime("%H:%M") if value else "—"


def code(text: object) -> str:
    """An identifier in backticks (backticks inside it removed)."""
    return "`" + " ".join(str(text).split()).replace("`", "'")[:200] + "`"


def when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%SZ") if value else "—"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    sign, s = ("-" if seconds < 0 else ""), round(abs(seconds))
    days, rest = divmod(s, 86400)
    h, rest = divmod(rest, 3600)
    m, sec = divmod(rest, 60)
    parts = [f"{days}d"] * bool(days) + [f"{h}h"] * bool(h) + [f"{m}m"] * bool(m)
    return sign + (" ".join(parts + [f"{sec}s"] * bool(sec or not parts)))


def gpu_h(value: float) -> str:
    return f"{value:,.1f}"


def _between(start: datetime | None, end: datetime | None) -> float | None:
    return (end - start).total_seconds() if start and end else None
