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
from jobtrail.auth import Principal
from jobtrail.http.common import ADAPTERS, BACKEND, fail, principal, reply
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
    ctx = Context(producer=clip(h.get("X-Jobtrail-Producer", adapter.name), 128),
                  observed_at=datetime.now(UTC), cluster=h.get("X-Jobtrail-Cluster", "default"),
                  project=project, job_id=h.get("X-Jobtrail-Job", ""),
                  attempt=int(attempt) if attempt else None,
                  node=h.get("X-Jobtrail-Node", ""), origin="body")
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
    decoded: list[Any] = await backend.parse(run, adapter, body, ctx)
    _refuse_foreign(who, decoded)
    telemetry.emit("events_received", len(decoded), channel=f"http.{adapter.name}")
    await backend.submit(decoded)
    return _answer(decoded, all_bad_is_422=False)
