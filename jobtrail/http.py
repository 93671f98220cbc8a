"""HTTP API: ingest (single event, batch array or JSON lines) and timeline reads.

Ingest answers 202 only once the records are durable: appended and fsynced to the embedded
log, or acknowledged by the Kafka broker. The response lists every rejected record with its
position, field and reason; rejected records are dead-lettered, never dropped.

Reads are bound to a project. When `JOBTRAIL_API_TOKENS` is set, every request needs
`Authorization: Bearer <token>` and a token reads only its own projects.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from ingest.canonical import decode
from jobtrail import telemetry
from jobtrail.config import Settings
from schemas.dead_letters import DeadLetter
from schemas.events import parse_time

log = logging.getLogger("jobtrail.http")

MAX_BODY_BYTES = 16 * 1024 * 1024
SETTINGS: web.AppKey[Settings] = web.AppKey("settings", Settings)
BACKEND: web.AppKey[Any] = web.AppKey("backend", object)
ADAPTERS: web.AppKey[Any] = web.AppKey("adapters", dict)


def _token_projects(request: web.Request) -> tuple[str, ...] | None:
    """None when auth is off; raises 401 for a missing or unknown token."""
    tokens = request.app[SETTINGS].api_tokens
    if not tokens:
        return None
    header = request.headers.get("Authorization", "")
    scheme, _, presented = header.partition(" ")
    if scheme.lower() == "bearer" and presented:
        for token, projects in tokens.items():
            if hmac.compare_digest(token.encode(), presented.strip().encode()):
                return projects
    raise web.HTTPUnauthorized(text='{"error": "missing or unknown bearer token"}',
                               content_type="application/json")


class EmbeddedBackend:
    """Embedded runtime behind the API: durable log append, background drain, chDB reads."""

    def __init__(self, settings: Settings) -> None:
        from jobtrail.app import embedded_runner, open_store

        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="chdb")
        self.store = open_store(settings)
        self.runner = embedded_runner(settings, self.store)
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, lambda: fn(*args, **kwargs))

    async def submit(self, records: list[Any]) -> None:
        await self.call(self.runner.submit, records)
        self._wake.set()

    async def command(self, command: Any) -> list[Any]:
        """Applied at once, in the same thread as the processors (one book)."""
        return await self.call(self.runner.sink.command, command)  # type: ignore[no-any-return]

    def topology(self) -> Any:
        """The live wiring the processors use (file plus applied `topology.link` events)."""
        return self.runner.sink.pipeline.topology

    async def _drain_loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=1.0)
            self._wake.clear()
            try:
                await self.call(self.runner.drain)
            except Exception:  # keep serving; the log keeps the records for the next drain
                log.exception("embedded drain failed; will retry")
                await asyncio.sleep(1.0)

    async def start(self) -> None:
        await self.call(self.runner.drain)
        self._task = asyncio.create_task(self._drain_loop())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
        await self.call(self.runner.drain)


class KafkaBackend:
    """Cluster mode: ingest produces to Kafka; reads go to the ClickHouse server."""

    def __init__(self, settings: Settings) -> None:
        from jobtrail.app import open_store
        from jobtrail.kafka_io import KafkaPublisher

        self.settings = settings
        self.executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="clickhouse")
        self.store = open_store(settings)
        self.publisher = KafkaPublisher(settings)

    async def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, lambda: fn(*args, **kwargs))

    async def submit(self, records: list[Any]) -> None:
        await self.publisher.publish(records)

    async def command(self, command: Any) -> None:
        """Queued on jobtrail.incident-commands; the worker applies or dead-letters it."""
        from jobtrail.kafka_io import publish_command

        await self.call(publish_command, self.settings, command)

    def topology(self) -> Any:
        from jobtrail.app import load_topology
        from jobtrail.queries import wiring

        return wiring(self.store, load_topology(self.settings))

    async def start(self) -> None:
        from jobtrail.kafka_io import ensure_topics

        await ensure_topics(self.settings)
        await self.publisher.start()

    async def stop(self) -> None:
        await self.publisher.stop()


async def ingest_events(request: web.Request) -> web.Response:
    _token_projects(request)
    body = await request.read()
    producer = request.headers.get("X-Jobtrail-Producer", "http")
    decoded = decode(body, producer=producer[:128], observed_at=datetime.now(UTC),
                     origin="body")
    telemetry.emit("events_received", len(decoded), channel="http")
    await request.app[BACKEND].submit(decoded)
    rejected = [
        {"ref": d.event_ref, "field": d.field, "reason": d.reason}
        for d in decoded if isinstance(d, DeadLetter)
    ]
    return web.json_response(
        {"accepted": len(decoded) - len(rejected), "dead_lettered": len(rejected),
         "rejected": rejected},
        status=202 if not rejected or len(rejected) < len(decoded) else 422)


async def ingest_source(request: web.Request) -> web.Response:
    """`POST /v1/ingest/{adapter}`: a push source's own payload (Alertmanager webhook, log
    lines); job context for logs comes from `X-Jobtrail-*` headers."""
    from ingest.adapters import Context, run
    from ingest.canonical import ParseError
    from ingest.cloudevents import from_binary

    _token_projects(request)
    adapter = request.app[ADAPTERS].get(request.match_info["adapter"])
    if adapter is None:
        raise web.HTTPNotFound(text='{"error": "no such adapter"}',
                               content_type="application/json")
    h = request.headers
    attempt = h.get("X-Jobtrail-Attempt", "")
    ctx = Context(producer=h.get("X-Jobtrail-Producer", adapter.name)[:128],
                  observed_at=datetime.now(UTC), cluster=h.get("X-Jobtrail-Cluster", "default"),
                  project=h.get("X-Jobtrail-Project", ""), job_id=h.get("X-Jobtrail-Job", ""),
                  attempt=int(attempt) if attempt.isdigit() else None,
                  node=h.get("X-Jobtrail-Node", ""), origin="body")
    raw = await request.read()
    body: bytes | str = raw
    if adapter.name == "cloudevents" and "ce-specversion" in h:  # binary mode
        try:
            body = from_binary(h, raw)
        except ParseError as exc:
            raise web.HTTPBadRequest(text=json.dumps({"error": f"{exc.field}: {exc.reason}"}),
                                     content_type="application/json") from None
    decoded = run(adapter, body, ctx)
    telemetry.emit("events_received", len(decoded), channel=f"http.{adapter.name}")
    await request.app[BACKEND].submit(decoded)
    rejected = [{"ref": d.event_ref, "field": d.field, "reason": d.reason}
                for d in decoded if isinstance(d, DeadLetter)]
    return web.json_response({"accepted": len(decoded) - len(rejected),
                              "dead_lettered": len(rejected), "rejected": rejected},
                             status=202)


def _query_time(request: web.Request, key: str) -> datetime | None:
    raw = request.query.get(key)
    if not raw:
        return None
    try:
        return parse_time(raw)
    except ValueError as exc:
        raise web.HTTPBadRequest(text=f'{{"error": "{key}: {exc}"}}',
                                 content_type="application/json") from None


async def job_timeline(request: web.Request) -> web.Response:
    allowed = _token_projects(request)
    project = request.query.get("project", "")
    if not project:
        raise web.HTTPBadRequest(text='{"error": "project is required"}',
                                 content_type="application/json")
    if allowed is not None and project not in allowed:
        # same answer as an unknown job: do not reveal which projects exist
        raise web.HTTPNotFound(text='{"error": "no such job"}', content_type="application/json")
    attempt_raw = request.query.get("attempt")
    try:
        attempt = int(attempt_raw) if attempt_raw else None
    except ValueError:
        raise web.HTTPBadRequest(text='{"error": "attempt must be an integer"}',
                                 content_type="application/json") from None
    backend = request.app[BACKEND]
    rows = await backend.call(backend.store.timeline, project, request.match_info["job_id"],
                              attempt=attempt, since=_query_time(request, "since"),
                              until=_query_time(request, "until"))
    return web.json_response({"rows": rows}, dumps=_dumps)


def _projects(request: web.Request) -> list[str]:
    """Requested projects (`?project=a&project=b`), narrowed to what the token may read."""
    allowed = _token_projects(request)
    wanted = request.query.getall("project", [])
    if not wanted:
        raise web.HTTPBadRequest(text='{"error": "project is required"}',
                                 content_type="application/json")
    return [p for p in wanted if allowed is None or p in allowed]


def _attempt_json(a: Any) -> dict[str, Any]:
    return {"project": a.project, "job_id": a.job_id, "attempt": a.attempt, "state": a.state,
            "nodes": list(a.nodes), "gpus": a.gpus, "started_at": a.started_at,
            "ended_at": a.ended_at, "mounts": list(a.mounts)}


async def where(request: web.Request) -> web.Response:
    """Attempts on ?node= / ?switch= / ?filesystem= at ?at= (project-bound)."""
    from jobtrail.queries import attempts_under

    projects = _projects(request)
    at = _query_time(request, "at")
    if at is None:
        raise web.HTTPBadRequest(text='{"error": "at is required"}',
                                 content_type="application/json")
    backend = request.app[BACKEND]
    q = request.query
    found = await backend.call(attempts_under, backend.store, backend.topology(), projects, at,
                               node=q.get("node", ""), switch=q.get("switch", ""),
                               filesystem=q.get("filesystem", ""))
    return web.json_response({"attempts": [_attempt_json(a) for a in found]}, dumps=_dumps)


async def attempt_resources(request: web.Request) -> web.Response:
    from jobtrail.queries import resources

    projects = _projects(request)
    backend = request.app[BACKEND]
    try:
        number = int(request.match_info["attempt"])
    except ValueError:
        raise web.HTTPBadRequest(text='{"error": "attempt must be an integer"}',
                                 content_type="application/json") from None
    found = None
    if projects:
        found = await backend.call(resources, backend.store, backend.topology(), projects[0],
                                   request.match_info["job_id"], number)
    if found is None:
        raise web.HTTPNotFound(text='{"error": "no such attempt"}',
                               content_type="application/json")
    return web.json_response({**_attempt_json(found.attempt), "switches": found.switches,
                              "links": found.links, "filesystems": found.filesystems,
                              "checkpoints": found.checkpoints}, dumps=_dumps)


async def entity_timeline(request: web.Request) -> web.Response:
    projects = _projects(request)
    backend = request.app[BACKEND]
    rows = await backend.call(backend.store.entity_timeline, projects,
                              request.match_info["name"], since=_query_time(request, "since"),
                              until=_query_time(request, "until"))
    return web.json_response({"rows": rows}, dumps=_dumps)


def _scope(request: web.Request) -> list[str] | None:
    """Projects an incident read is bound to: the token's, narrowed by `?project=`; None
    only for an open (auth-off, local) API asked for everything."""
    allowed = _token_projects(request)
    wanted = request.query.getall("project", [])
    if allowed is None:
        return wanted or None
    return [p for p in (wanted or allowed) if p in allowed]


def _not_found(what: str) -> web.HTTPNotFound:
    return web.HTTPNotFound(text=json.dumps({"error": f"no such {what}"}),
                            content_type="application/json")


async def list_incidents(request: web.Request) -> web.Response:
    backend = request.app[BACKEND]
    rows = await backend.call(backend.store.incidents, _scope(request),
                              status=request.query.get("status", ""),
                              since=_query_time(request, "since"))
    return web.json_response({"incidents": rows}, dumps=_dumps)


async def show_incident(request: web.Request) -> web.Response:
    backend = request.app[BACKEND]
    found = await backend.call(backend.store.incident, request.match_info["incident_id"],
                               _scope(request))
    if found is None:  # unknown, or touching none of the caller's projects: same answer
        raise _not_found("incident")
    return web.json_response(found, dumps=_dumps)


async def incident_command(request: web.Request) -> web.Response:
    """`POST /v1/incidents/{id}/commands` `{"command": "ack", "by": "alice", "command_id":
    "...", "data": {...}}`: 200 with the events it appended (embedded), 202 queued (cluster),
    409 with the reason when the incident's state refuses it, 422 for a malformed command."""
    from pydantic import ValidationError

    from processors.incidents.model import Actor, Command, InvalidTransition

    backend = request.app[BACKEND]
    incident_id = request.match_info["incident_id"]
    scope = _scope(request)
    if await backend.call(backend.store.incident, incident_id, scope) is None:
        raise _not_found("incident")
    try:
        body = json.loads(await request.read())
        by = str(body.get("by") or "")
        command = Command(command_id=str(body.get("command_id") or ""),
                          incident_id=incident_id, command=body.get("command"),
                          actor=Actor(kind="team" if by.startswith("team:") else "person",
                                      name=by.removeprefix("team:")),
                          time=datetime.now(UTC), data=body.get("data") or {})
    except (ValueError, AttributeError) as exc:
        detail = exc.errors()[0] if isinstance(exc, ValidationError) else {"msg": str(exc)}
        where = ".".join(str(x) for x in detail.get("loc", ()))
        raise web.HTTPUnprocessableEntity(
            text=json.dumps({"error": f"{where}: {detail['msg']}" if where else detail["msg"]}),
            content_type="application/json") from None
    try:
        events = await backend.command(command)
    except InvalidTransition as exc:
        raise web.HTTPConflict(text=json.dumps({"error": str(exc)}),
                               content_type="application/json") from None
    if events is None:
        return web.json_response({"queued": command.command_id}, status=202)
    return web.json_response({"events": [e.model_dump(mode="json") for e in events]})


def _dumps(value: Any) -> str:
    import json

    return json.dumps(value, default=lambda v: v.isoformat() if isinstance(v, datetime) else str(v))


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def metrics(request: web.Request) -> web.Response:
    return web.Response(text=telemetry.prometheus(), content_type="text/plain")


def create_app(settings: Settings, backend: Any | None = None) -> web.Application:
    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app[SETTINGS] = settings
    from ingest.adapters import registry

    app[ADAPTERS] = registry(settings.adapter_config())  # mapping files validated at start

    async def lifecycle(app: web.Application) -> Any:
        app[BACKEND] = backend or (KafkaBackend(settings) if settings.cluster_mode
                                   else EmbeddedBackend(settings))
        await app[BACKEND].start()
        yield
        await app[BACKEND].stop()

    app.cleanup_ctx.append(lifecycle)
    app.router.add_post("/v1/events", ingest_events)
    app.router.add_post("/v1/ingest/{adapter}", ingest_source)
    app.router.add_get("/v1/jobs/{job_id}/timeline", job_timeline)
    app.router.add_get("/v1/where", where)
    app.router.add_get("/v1/jobs/{job_id}/attempts/{attempt}", attempt_resources)
    app.router.add_get("/v1/entities/{name}/timeline", entity_timeline)
    app.router.add_get("/v1/incidents", list_incidents)
    app.router.add_get("/v1/incidents/{incident_id}", show_incident)
    app.router.add_post("/v1/incidents/{incident_id}/commands", incident_command)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics)
    return app


def serve(settings: Settings) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    web.run_app(create_app(settings), host=settings.http_host, port=settings.http_port,
                print=lambda msg: log.info("%s", msg))
