"""Ingest routes: canonical events (`POST /v1/events`) and a source's own payload
(`POST /v1/ingest/{adapter}`).

Both answer only once the records are durable (the embedded log fsynced, or the broker
acknowledged), list every rejected record with its position, field and reason (rejected
records are dead-lettered, never dropped), and are bound to the token's projects: one record
the token may not write refuses the whole request with 403 naming the project.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from ingest.canonical import decode
from ingest.redact import clip
from jobtrail import telemetry
from jobtrail.http.common import ADAPTERS, BACKEND, SETTINGS, fail, reply
from jobtrail.http.guard import principal
from jobtrail.identity import Principal
from schemas.dead_letters import DeadLetter
from schemas.events import Event


def _refuse_foreign(who: Principal, records: Sequence[Event | DeadLetter],
                    header_project: str = "") -> None:
    if header_project and (why := who.write_refusal(header_project)):
        fail(web.HTTPForbidden, why)
    for record in records:
        if isinstance(record, Event) and (why := who.write_refusal(record.project)):
            fail(web.HTTPForbidden, why)


def _answer(decoded: list[Event | DeadLetter], *, all_bad_is_422: bool) -> web.Response:
    rejected = [{"ref": d.event_ref, "field": d.field, "reason": d.reason}
                for d in decoded if isinstance(d, DeadLetter)]
    accepted = len(decoded) - len(rejected)
    status = 422 if all_bad_is_422 and rejected and not accepted else 202
    return reply({"accepted": accepted, "dead_lettered": len(rejected), "rejected": rejected},
                 status=status)


async def ingest_events(request: web.Request) -> web.Response:
    who = principal(request)
    body = await request.read()
    producer = clip(request.headers.get("X-Jobtrail-Producer", "http"), 128)
    backend = request.app[BACKEND]
    decoded: list[Any] = await backend.parse(decode, body, producer=producer,
                                             observed_at=datetime.now(UTC), origin="body")
    _refuse_foreign(who, decoded)
    telemetry.emit("events_received", len(decoded), channel="http")
    await backend.submit(decoded)
    return _answer(decoded, all_bad_is_422=True)


def _time_headers(h: Any) -> tuple[Any, str, int | None]:
    """X-Jobtrail-Boot-Time (ISO 8601 or epoch seconds), X-Jobtrail-Timezone (IANA),
    X-Jobtrail-Year: how to place line times the lines do not fully say."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    from schemas.events import parse_time

    boot_raw, zone = h.get("X-Jobtrail-Boot-Time", ""), h.get("X-Jobtrail-Timezone") or "UTC"
    year_raw = h.get("X-Jobtrail-Year", "")
    boot = None
    try:
        if boot_raw:
            boot = (datetime.fromtimestamp(float(boot_raw), tz=UTC)
                    if boot_raw.replace(".", "", 1).isdigit() else parse_time(boot_raw))
        ZoneInfo(zone)
    except (ValueError, OverflowError, OSError, ZoneInfoNotFoundError):
        fail(web.HTTPBadRequest, "X-Jobtrail-Boot-Time must be ISO 8601 or epoch seconds and "
                                 "X-Jobtrail-Timezone an IANA zone")
    if year_raw and not (year_raw.isdigit() and 1970 <= int(year_raw) <= 2200):
        fail(web.HTTPBadRequest, "X-Jobtrail-Year must be a year")
    return boot, zone, int(year_raw) if year_raw else None


async def ingest_source(request: web.Request) -> web.Response:
    """A push source's own payload (Alertmanager webhook, log lines); job context for logs
    comes from `X-Jobtrail-*` headers."""
    from ingest.adapters import Context, run
    from ingest.canonical import ParseError
    from ingest.cloudevents import from_binary

    who = principal(request)
    adapter = request.app[ADAPTERS].get(request.match_info["adapter"])
    if adapter is None:
        fail(web.HTTPNotFound, "no such adapter")
    h = request.headers
    attempt = h.get("X-Jobtrail-Attempt", "")
    if attempt and not (attempt.isdigit() and len(attempt) <= 9):
        fail(web.HTTPBadRequest, "X-Jobtrail-Attempt must be a non-negative integer")
    project = h.get("X-Jobtrail-Project", "")
    boot_time, zone, year = _time_headers(h)
    ctx = Context(producer=clip(h.get("X-Jobtrail-Producer", adapter.name), 128),
                  observed_at=datetime.now(UTC), cluster=h.get("X-Jobtrail-Cluster", "default"),
                  project=project, job_id=h.get("X-Jobtrail-Job", ""),
                  attempt=int(attempt) if attempt else None,
                  node=h.get("X-Jobtrail-Node", ""), origin="body", boot_time=boot_time,
                  tz=zone, year=year, kind=clip(h.get("X-Jobtrail-Kind", ""), 64))
    if project and (why := who.write_refusal(project)):
        fail(web.HTTPForbidden, why)
    raw = await request.read()
    body: bytes | str = raw
    if adapter.name == "cloudevents" and "ce-specversion" in h:  # binary mode
        try:
            body = from_binary(h, raw)
        except ParseError as exc:
            fail(web.HTTPBadRequest, f"{exc.field}: {exc.reason}")
    backend = request.app[BACKEND]
    budget = request.app[SETTINGS].parse_budget_s
    decoded: list[Any] = await backend.parse(run, adapter, body, ctx, budget_s=budget)
    _refuse_foreign(who, decoded)
    telemetry.emit("events_received", len(decoded), channel=f"http.{adapter.name}")
    await backend.submit(decoded)
    return _answer(decoded, all_bad_is_422=False)
