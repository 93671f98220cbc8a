"""The time a log line says it happened, in every prefix clusters print.

An event stamped with the time it was read when its line had a time is a defect, so every
line adapter reads its prefix here. What is understood (examples from public bug reports,
tests/fixtures/logs/SOURCES.md):

- ISO 8601 (journalctl -o short-iso, Python logging, dmesg --time-format=iso):
  `2025-01-21T04:41:44,283302+00:00`, `2026-11-30 08:57:34,120`, `[2026-11-30T08:57:34Z]`;
- dmesg -x facility and level before any of these: `kern  :warn  : 2025-01-21T04:...`;
- dmesg -T / --ctime (local time): `[Sun Feb 23 16:24:18 2025]`;
- syslog and journalctl's default (no year): `Nov 30 08:57:34 host prog[12]: `, with
  `.123456` fractions (-o short-precise);
- RFC 5424 / 3164 with a priority: `<13>1 2026-11-30T08:57:34Z host app - - - `,
  `<34>Nov 30 08:57:34 host `;
- glog / absl (PyTorch's C++, torchrun; no year): `E1206 18:44:12.123456 12345 file.cc:42] `,
  and PyTorch's per-rank form `[rank1]:[E626 06:24:44.903881913 ProcessGroupNCCL.cpp:616] `;
- journalctl -o short-unix: `1764492000.123456 host kernel: `;
- NVIDIA Fabric Manager: `[Nov 30 2026 08:57:34] [ERROR] [tid 12] ...` (local time);
- raw dmesg, seconds since boot: `[ 1843.308145] `;
- /dev/kmsg: `6,1234,5678901234,-;` (priority, sequence, microseconds since boot, flags).

`time_source` says which: `line`, `line_year` (the year was inferred), `boot` (seconds since
boot placed by the boot time) or `observed` (no time in the line: when it was read). A line
of a file with no time of its own lies `between` the nearest timed lines around it: the
reader stamps it with the one before (`previous_line`, else `next_line`) and gives the
interval (`time_lower`, `time_upper`), so what reads it knows its order is uncertain.

A local time (no zone) is in the context's time zone (`--tz`, default UTC). A year the line
does not say is the context's (`--year`), else the one that puts it nearest the first full
date a line of the same paste starts with (`Context.reference`: an ISO time, dmesg -T's
ctime), else the year of when it was read, one less when that would put the line more than
a day in the future (December's lines read in January).
Seconds since boot need the boot time (`--boot-time`, or `btime` from /proc/stat); without
it the line is stamped when it was read (the offset is on the `Stamp`), flagged
`time_source: observed`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError


class Context(Protocol):
    """What placing a line's time needs from the shipper (`ingest.base.Context` has it)."""

    @property
    def observed_at(self) -> datetime: ...
    @property
    def boot_time(self) -> datetime | None: ...
    @property
    def tz(self) -> str: ...
    @property
    def year(self) -> int | None: ...
    @property
    def reference(self) -> datetime | None: ...


_MONTHS = {m: i for i, m in enumerate(
    ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"],
    start=1)}
_MON = "(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_DOW = "(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)"
_HOST = r"(?P<host>[\w.-]+)"

_KMSG = re.compile(r"^(?P<pri>\d{1,3}),(?P<seq>\d+),(?P<usec>\d+)(?:,[^;]*)?;(?P<rest>.*)$",
                   re.S)
_FACILITY = re.compile(r"^(?:kern|user|mail|daemon|auth|syslog|lpr|news|uucp|cron|authpriv|"
                       r"ftp|local[0-7])\s*:\s*(?P<level>emerg|alert|crit|err|warn|notice|"
                       r"info|debug)\s*:\s*")
_RFC5424 = re.compile(r"^<(?P<pri>\d{1,3})>1 (?P<ts>\S+) (?P<host>\S+) (?P<app>\S+) \S+ \S+ "
                      r"(?:-|(?:\[[^\]]*\])+) ?")
_PRI = re.compile(r"^<(?P<pri>\d{1,3})>(?:1 )?")
_ISO = re.compile(r"^\[?(?P<ts>\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?"
                  r"(?P<zone>Z|[+-]\d\d:?\d\d)?)\]?\s+(?:" + _HOST + r" (?=\S+?(?:\[\d+\])?: ))?")
_CTIME = re.compile(r"^\[" + _DOW + r" (?P<mon>" + _MON + r") +(?P<day>\d{1,2}) "
                    r"(?P<hms>\d\d:\d\d:\d\d) (?P<year>\d{4})\]\s*")
_FABRIC = re.compile(r"^\[(?P<mon>" + _MON + r") +(?P<day>\d{1,2}) (?P<year>\d{4}) "
                     r"(?P<hms>\d\d:\d\d:\d\d)\]\s*")
_SYSLOG = re.compile(r"^(?P<mon>" + _MON + r") +(?P<day>\d{1,2}) (?P<hms>\d\d:\d\d:\d\d)"
                     r"(?P<frac>\.\d+)? " + _HOST + r" ")
_GLOG = re.compile(r"^(?:\[rank\d+\]:)?\[?(?P<level>[IWEF])(?P<mm>[01]?\d)(?P<dd>[0-3]\d)"
                   r" (?P<hms>\d\d:\d\d:\d\d)(?P<frac>\.\d+)?(?:\s+(?P<tid>\d+))?\s+"
                   r"(?P<file>[^\s:\]]+:\d+)\]\s?")
_EPOCH = re.compile(r"^(?P<epoch>1\d{9}(?:\.\d+)?) " + _HOST + r" ")
_QUOTE = re.compile(r"^> ?(?=\S)")
_STAMPED = r"(?=\[|" + _MON + r" +\d|\d{4}-\d\d-\d\d[T ])"
_GREP_FILE = re.compile(r"^[\w./-]{1,200}?:" + _STAMPED)  # `grep -r`: `messages:Jun 17 ...`
_PDSH_HOST = re.compile(r"^(?P<host>(?=[\w.-]{0,63}\d)[\w.-]{1,64}): " + _STAMPED)
_PID = re.compile(r"^\[\d{1,10}\] (?=\[rank\d+\]:|\[?[IWEF]\d{4} )")
_MINUTE = re.compile(r"^\s*(?P<ts>\d{4}-\d\d-\d\d[T ]\d\d:\d\d)(?P<zone>Z|[+-]\d\d:?\d\d)?\s+"
                     r"(?=\S)(?!\d)")
_UPTIME = re.compile(r"^\[\s*(?P<sec>\d+\.\d+)\]\s?")
_LEVELS = {"emerg": "critical", "alert": "critical", "crit": "critical", "err": "error",
           "warn": "warning", "notice": "info", "info": "info", "debug": "debug"}
_PRIORITY = ["critical", "critical", "critical", "error", "warning", "info", "info", "debug"]
_GLOG_LEVELS = {"I": "info", "W": "warning", "E": "error", "F": "critical"}


@dataclass(frozen=True)
class Stamp:
    time: str
    """ISO 8601, UTC."""
    source: str
    """line, line_year (the year inferred), boot (seconds since boot + the boot time),
    observed (no time in the line, or one that cannot be placed: when it was read)."""
    host: str = ""
    rest: str = ""
    """The line after its prefix."""
    level: str = ""
    """A severity the prefix states (kmsg priority, dmesg -x level, glog letter)."""
    boot_offset_s: float | None = None


def _zone(ctx: Context) -> ZoneInfo:
    try:
        return ZoneInfo(ctx.tz or "UTC")
    except (ZoneInfoNotFoundError, ValueError):
        return ZoneInfo("UTC")


def _year(ctx: Context, month: int, day: int) -> int:
    if ctx.year:
        return ctx.year
    if (ref := ctx.reference) is not None:
        return min((ref.year - 1, ref.year, ref.year + 1),
                   key=lambda y: abs((_date(y, month, day) - ref).days))
    year = ctx.observed_at.year
    try:
        if datetime(year, month, day, tzinfo=UTC) > ctx.observed_at + timedelta(days=1):
            return year - 1
    except ValueError:  # 29 February of a year that has none: the previous leap year's
        return year - 1
    return year


def _date(year: int, month: int, day: int) -> datetime:
    try:
        return datetime(year, month, day)
    except ValueError:  # 29 February of a year that has none: never the nearest
        return datetime(year, 1, 1) + timedelta(days=3660)


_STATED = re.compile(r"(?m)^[ \t>]{0,8}+\[?(?P<y>(?:19|20)\d\d)-(?P<mo>[01]\d)-(?P<d>[0-3]\d)[T ]"
                     r"(?P<h>[0-2]\d):(?P<mi>[0-5]\d)|^[ \t>]{0,8}+\[" + _DOW + r" (?P<cmon>" + _MON
                     + r") +(?P<cd>\d{1,2}) (?P<ch>\d\d):\d\d:\d\d (?P<cy>(?:19|20)\d\d)\]|"
                     r"^(?P<ny>(?:19|20)\d\d)(?P<nmo>[01]\d)(?P<nd>[0-3]\d) \d\d:\d\d:\d\d ")
"""A full date a line starts with (ISO 8601, dmesg -T's ctime, NHC's `20190409 13:20:33`)."""


def stated_date(text: str, limit: int = 200_000) -> datetime | None:
    """The first full date a line of `text` starts with: where a year-less time (syslog,
    glog) in the same paste takes its year from, instead of the year it was read in."""
    for m in _STATED.finditer(text, 0, min(len(text), limit)):
        try:
            if m["y"]:
                return datetime(int(m["y"]), int(m["mo"]), int(m["d"]), int(m["h"]))
            if m["cy"]:
                return datetime(int(m["cy"]), _MONTHS[m["cmon"]], int(m["cd"]), int(m["ch"]))
            return datetime(int(m["ny"]), int(m["nmo"]), int(m["nd"]))
        except ValueError:
            continue
    return None


def _local(ctx: Context, year: int, month: int, day: int, hms: str, frac: str = "") -> str:
    hh, mm, ss = (int(x) for x in hms.split(":"))
    micro = int((frac.lstrip(".") + "000000")[:6]) if frac else 0
    when = datetime(year, month, day, hh, mm, ss, micro, tzinfo=_zone(ctx))
    return when.astimezone(UTC).isoformat()


def _iso(ts: str, zone: str | None, ctx: Context) -> str:
    text = ts.replace(",", ".").replace(" ", "T", 1)
    if zone and re.fullmatch(r"[+-]\d{4}", zone):
        text = text[: -len(zone)] + zone[:3] + ":" + zone[3:]
    when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if when.tzinfo is None:
        when = when.replace(tzinfo=_zone(ctx))
    return when.astimezone(UTC).isoformat()


def _boot(ctx: Context, seconds: float, rest: str, level: str = "") -> Stamp:
    if ctx.boot_time is None:
        return Stamp(ctx.observed_at.isoformat(), "observed", "", rest, level, seconds)
    when = ctx.boot_time + timedelta(seconds=seconds)
    return Stamp(when.astimezone(UTC).isoformat(), "boot", "", rest, level, seconds)


@dataclass(frozen=True)
class _YearOf:
    """`ctx` with the year a wrapper's prefix states (for a glog line inside it)."""

    ctx: Context
    year: int

    @property
    def observed_at(self) -> datetime:
        return self.ctx.observed_at

    @property
    def boot_time(self) -> datetime | None:
        return self.ctx.boot_time

    @property
    def tz(self) -> str:
        return self.ctx.tz

    @property
    def reference(self) -> datetime | None:
        return None


def _wrapped(text: str, ctx: Context) -> Stamp | None:
    """A line inside what a person or a collector put before it: a Markdown quote (`> `), a
    launcher's `[pid] ` before torch's `[rankN]:` or glog, a collector's minute-resolution
    ` 2025-02-18 12:54 ` before the program's own line. The inner line's own time wins
    (the collector's year helps it); else the collector's minute."""
    if m := _QUOTE.match(text) or _GREP_FILE.match(text):
        return _read(text[m.end():], ctx)
    if m := _PDSH_HOST.match(text):  # `pdsh -w gpu[01-08] dmesg`: the host is the prefix's
        inner = _read(text[m.end():], ctx)
        return replace(inner, host=inner.host or m["host"])
    if m := _PID.match(text):
        return _read(text[m.end():], ctx)
    if m := _MINUTE.match(text):
        inner = _read(text[m.end():], _YearOf(ctx, int(m["ts"][:4])))
        if inner.source != "observed":
            return replace(inner, source="line")
        try:
            return Stamp(_iso(m["ts"] + ":00", m["zone"], ctx), "line", "", text[m.end():])
        except ValueError:
            return None
    return None


def read(line: str, ctx: Context) -> Stamp:
    """The time, host and the rest of `line` (see the module's table)."""
    text = line.lstrip("\ufeff")
    if (wrapped := _wrapped(text, ctx)) is not None:
        return wrapped  # one wrapper, not nested: a hostile line cannot recurse
    return _read(text, ctx)


def _read(text: str, ctx: Context, depth: int = 0) -> Stamp:
    """`depth`: prefixes already taken off (a facility, a priority): at most two, so a line
    of repeated prefixes is read once, not recursed into."""
    m = _KMSG.match(text)
    if m:
        level = _PRIORITY[int(m["pri"]) & 7]
        return _boot(ctx, int(m["usec"]) / 1e6, m["rest"], level)
    m = _FACILITY.match(text) if depth < 2 else None
    if m:
        inner = _read(text[m.end():], ctx, depth + 1)
        return Stamp(inner.time, inner.source, inner.host, inner.rest,
                     _LEVELS.get(m["level"], ""), inner.boot_offset_s)
    m = _RFC5424.match(text)
    if m:
        try:
            when = _iso(m["ts"], None, ctx)
        except ValueError:
            when = ""
        if when:
            host = "" if m["host"] == "-" else m["host"]
            app = "" if m["app"] == "-" else f"{m['app']}: "
            return Stamp(when, "line", host, app + text[m.end():],
                         _PRIORITY[int(m["pri"]) & 7])
    m = _PRI.match(text) if depth < 2 else None
    if m:
        inner = _read(text[m.end():], ctx, depth + 1)
        level = inner.level or _PRIORITY[int(m["pri"]) & 7]
        return Stamp(inner.time, inner.source, inner.host, inner.rest, level,
                     inner.boot_offset_s)
    m = _ISO.match(text)
    if m:
        try:
            return Stamp(_iso(m["ts"], m["zone"], ctx), "line", m["host"] or "",
                         text[m.end():])
        except ValueError:
            pass
    m = _CTIME.match(text)
    if m:
        when = _local(ctx, int(m["year"]), _MONTHS[m["mon"]], int(m["day"]), m["hms"])
        return Stamp(when, "line", "", text[m.end():])
    m = _FABRIC.match(text)  # NVIDIA Fabric Manager: [Nov 30 2026 08:57:34]
    if m:
        when = _local(ctx, int(m["year"]), _MONTHS[m["mon"]], int(m["day"]), m["hms"])
        return Stamp(when, "line", "", text[m.end():])
    m = _UPTIME.match(text)
    if m:
        return _boot(ctx, float(m["sec"]), text[m.end():])
    m = _SYSLOG.match(text)
    if m:
        month, day = _MONTHS[m["mon"]], int(m["day"])
        try:
            when = _local(ctx, _year(ctx, month, day), month, day, m["hms"], m["frac"] or "")
        except ValueError:
            return Stamp(ctx.observed_at.isoformat(), "observed", m["host"], text[m.end():])
        return Stamp(when, "line" if ctx.year else "line_year", m["host"], text[m.end():])
    m = _GLOG.match(text)
    if m:
        month, day = int(m["mm"]), int(m["dd"])
        try:
            when = _local(ctx, _year(ctx, month, day), month, day, m["hms"], m["frac"] or "")
        except ValueError:
            return Stamp(ctx.observed_at.isoformat(), "observed", "", text)
        return Stamp(when, "line" if ctx.year else "line_year", "", text[m.end():],
                     _GLOG_LEVELS[m["level"]])
    m = _EPOCH.match(text)
    if m:
        epoch = datetime.fromtimestamp(float(m["epoch"]), tz=UTC)
        return Stamp(epoch.isoformat(), "line", m["host"], text[m.end():])
    return Stamp(ctx.observed_at.isoformat(), "observed", "", text)


def local_time(text: str, ctx: Context) -> str:
    """A time a line states without a zone (torchelastic's `2026-11-30_08:57:50`), in the
    context's zone; ISO 8601 UTC."""
    return _iso(text.strip().replace("_", " ", 1), None, ctx)


def between(index: int, count: int, timed: Callable[[int], str | None],
            reach: int = 200) -> tuple[int | None, int | None]:
    """The nearest lines before and after line `index` (of `count`, within `reach` lines)
    that have a time of their own (`timed(n)` is it, or None): a line printed without one (a
    rank's exception after its last timed line) happened between them, and no nearer."""
    before = next((n for n in range(index - 1, max(-1, index - 1 - reach), -1)
                   if timed(n) is not None), None)
    after = next((n for n in range(index + 1, min(count, index + 1 + reach))
                  if timed(n) is not None), None)
    return before, after


def boot_time_from_proc_stat(text: str) -> datetime | None:
    """`btime` of /proc/stat (seconds since the epoch when the machine booted)."""
    m = re.search(r"^btime (\d+)$", text, re.M)
    return datetime.fromtimestamp(int(m[1]), tz=UTC) if m else None
