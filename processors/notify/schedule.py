"""When a decided notification may go out: quiet hours and digests, in the subscriber's
time zone (zoneinfo, so a quiet window across midnight or a DST change ends at the right
local time)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, time, timedelta

from processors.notify.model import Decision, QuietHours, Subscription, _clock


def _local(day: datetime, clock: time, sub: Subscription) -> datetime:
    """`clock` on the local calendar day of `day`, as an aware datetime in the zone (a time
    skipped by a DST jump resolves forward, as zoneinfo's fold=0 does)."""
    return datetime.combine(day.date(), clock, tzinfo=sub.zone)


def quiet_until(sub: Subscription, quiet: QuietHours, at: datetime) -> datetime | None:
    """The end of the quiet window `at` falls in, or None when it is outside."""
    local = at.astimezone(sub.zone)
    start, end = _clock(quiet.start), _clock(quiet.end)
    if start == end:
        return None
    for offset in (-1, 0):  # a window that began yesterday may still be running
        day = local + timedelta(days=offset)
        begins = _local(day, start, sub)
        ends_day = day + timedelta(days=1) if end <= start else day
        ends = _local(ends_day, end, sub)
        if begins <= local < ends:
            return ends.astimezone(at.tzinfo)
    return None


def next_tick(sub: Subscription, at: datetime) -> datetime:
    from croniter import croniter

    local = at.astimezone(sub.zone)
    tick: datetime = croniter(sub.digest_cron, local).get_next(datetime)
    return tick.astimezone(at.tzinfo)


def deliver_at(sub: Subscription, d: Decision) -> Decision:
    """Step 6: quiet hours hold what may wait; a digest subscription collects into ticks."""
    if d.status != "pending":
        return d
    out = d
    if sub.quiet is not None and d.severity not in sub.quiet.bypass:
        ends = quiet_until(sub, sub.quiet, d.not_before)
        if ends is not None:
            note = f"quiet hours until {ends.astimezone(sub.zone).strftime('%H:%M %Z')}"
            out = replace(out, not_before=ends,
                          reason=f"{out.reason}; {note}" if out.reason else note)
    if sub.mode == "digest":
        tick = next_tick(sub, out.not_before)
        out = replace(out, not_before=tick, digest_key=tick.isoformat())
    return out
