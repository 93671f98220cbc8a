"""HTTP API (described by `openapi.yaml`, served at `/openapi.json`).

Routes by concern: `ingest.py` (events and source payloads in), `reads.py` (timelines,
membership, entities), `incidents.py` (list, show, commands), `postmortem.py`
(postmortems, follow-ups, the review page), `alerts.py` (subscriptions, deliveries, the
alerts loop), `health.py` (probes, metrics,
the document). Every route knows its caller (`guard.principal`) and is bound to its
projects; the runtime behind it (`backend.py`) is the same one the CLI uses.
"""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import web

from jobtrail.config import Settings
from jobtrail.http import alerts, beside, health, incidents, ingest, links, login, postmortem, reads
from jobtrail.http.backend import RuntimeBackend
from jobtrail.http.common import ADAPTERS, BACKEND, SETTINGS, fail
from jobtrail.http.guard import SESSIONS, guard
from jobtrail.identity.session import Sessions

log = logging.getLogger("jobtrail.http")

MAX_BODY_BYTES = 16 * 1024 * 1024

__all__ = ["BACKEND", "SETTINGS", "RuntimeBackend", "create_app", "serve"]


@web.middleware
async def _json_errors(request: web.Request, handler: Any) -> web.StreamResponse:
    """Every error is JSON; an unexpected one is logged and answered 500 without details."""
    try:
        return await handler(request)  # type: ignore[no-any-return]
    except web.HTTPException as exc:
        if exc.content_type == "application/json" or exc.status < 400:
            raise
        headers = {k: v for k, v in exc.headers.items()
                   if k.lower() not in ("content-type", "content-length")}
        return web.json_response({"error": exc.reason or "error"}, status=exc.status,
                                 headers=headers)
    except Exception:
        log.exception("unhandled error on %s %s", request.method, request.path)
        fail(web.HTTPInternalServerError, "internal error (logged)")


def create_app(settings: Settings, backend: Any | None = None) -> web.Application:
    app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[_json_errors, guard])
    app[SETTINGS] = settings
    app[SESSIONS] = Sessions(settings.session_key, settings.session_max_age_s)
    if not settings.session_key and (settings.api_tokens or settings.oidc):
        log.info("JOBTRAIL_SESSION_KEY is not set: browser sessions end when this process "
                 "does")
    login.setup(app)
    health.setup(app)
    from ingest.adapters import registry

    app[ADAPTERS] = registry(settings.adapter_config())  # mapping files validated at start

    async def lifecycle(app: web.Application) -> Any:
        if backend is not None:
            app[BACKEND] = backend
        else:
            from jobtrail.app import open_runtime

            app[BACKEND] = RuntimeBackend(open_runtime(settings))
        await app[BACKEND].start()
        yield
        await app[BACKEND].stop()

    app.cleanup_ctx.append(lifecycle)
    app.cleanup_ctx.append(beside.announce)  # the CLI on this host commands through it
    app.cleanup_ctx.append(alerts.alerts_loop)
    routes = [
        ("POST", "/v1/events", ingest.ingest_events),
        ("POST", "/v1/ingest/{adapter}", ingest.ingest_source),
        ("GET", "/v1/jobs/{job_id}/timeline", reads.job_timeline),
        ("GET", "/v1/where", reads.where),
        ("GET", "/v1/jobs/{job_id}/attempts/{attempt}", reads.attempt_resources),
        ("GET", "/v1/entities/{name}/timeline", reads.entity_timeline),
        ("GET", "/v1/incidents", incidents.list_incidents),
        ("GET", "/v1/incidents/{incident_id}", incidents.show_incident),
        ("POST", "/v1/incidents/{incident_id}/commands", incidents.incident_command),
        ("GET", "/v1/incidents/{incident_id}/postmortem", postmortem.read),
        *[("POST", f"/v1/incidents/{{incident_id}}/postmortem/{verb}", postmortem.command)
          for verb in postmortem.VERBS],
        ("GET", "/v1/followups", postmortem.followups),
        ("GET", "/incidents/{incident_id}/postmortem", postmortem.page),
        ("GET", r"/ui/{name:postmortem\.js|jobtrail\.css}", postmortem.static),
        *login.ROUTES,
        *alerts.ROUTES,
        *links.ROUTES,
        ("GET", "/livez", health.livez),
        ("GET", "/readyz", health.readyz),
        ("GET", "/healthz", health.readyz),
        ("GET", "/metrics", health.metrics),
        ("GET", "/openapi.json", health.openapi),
    ]
    for method, path, handler in routes:
        app.router.add_route(method, path, handler)
    return app


def serve(settings: Settings) -> None:
    """Listen on `http_host:http_port`: beyond loopback only with a credential configured
    or the operator's explicit opt-in (`Settings.check_listener`)."""
    settings.check_listener()
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    web.run_app(create_app(settings), host=settings.http_host, port=settings.http_port,
                print=lambda msg: log.info("%s", msg))
