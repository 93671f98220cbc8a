"""Probes, metrics and the API's own description.

- `/livez`: the process and its event loop answer (no I/O): restart it when this fails.
- `/readyz`: the runtime started and its store (and broker, in cluster mode) answered a
  check within the last 30 s: send traffic only when this is 200. Checks run every 5 s on
  the processing thread; the endpoint returns the last result at once (503 with the failing
  checks), so a long batch never blocks the probe.
- `/healthz`: the same as `/readyz`, kept for existing probes.
"""

from __future__ import annotations

from importlib import resources

import yaml
from aiohttp import web

from jobtrail import telemetry
from jobtrail.http.common import BACKEND, reply


async def livez(request: web.Request) -> web.Response:
    return reply({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    ready, checks = request.app[BACKEND].readiness()
    return reply({"status": "ok" if ready else "unavailable", "checks": checks},
                 status=200 if ready else 503)


async def metrics(request: web.Request) -> web.Response:
    return web.Response(text=telemetry.prometheus(), content_type="text/plain")


def openapi_document() -> dict[str, object]:
    text = resources.files("jobtrail.http").joinpath("openapi.yaml").read_text()
    document = yaml.safe_load(text)
    assert isinstance(document, dict)
    return document


async def openapi(request: web.Request) -> web.Response:
    return reply(openapi_document())
