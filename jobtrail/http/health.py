"""Probes, metrics and the API's own description.

- `/livez`: the process and its event loop answer (no I/O): restart it when this fails.
- `/readyz`: the runtime started, its store answers now, and its broker (cluster mode)
  answered a check within the last 30 s: send traffic only when this is 200 (503 with the
  failing checks and why). A ClickHouse server is asked on each request (`SELECT 1` on a
  client of the probe's own with 2-second timeouts, `jobtrail.store.probe`), so a stopped or
  paused server is a 503 within seconds and the probe never waits for a busy processing
  thread; the embedded engine and the broker are checked every 5 s on the processing thread
  and the endpoint returns their last result at once, so a long batch never blocks it.
- `/healthz`: the same as `/readyz`, kept for existing probes.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

import yaml
from aiohttp import web

from jobtrail import telemetry
from jobtrail.http.common import BACKEND, SETTINGS, reply
from jobtrail.store.probe import StoreProbe


async def livez(request: web.Request) -> web.Response:
    return reply({"status": "ok"})


PROBE: web.AppKey[Any] = web.AppKey("store_probe", object)


def setup(app: web.Application) -> None:
    """The store probe for the configured server (none for the embedded engine)."""
    settings = app[SETTINGS]
    app[PROBE] = StoreProbe.of(settings.dsn, settings.database)

    async def close(app: web.Application) -> None:
        if app[PROBE] is not None:
            app[PROBE].close()

    app.on_cleanup.append(close)


async def readyz(request: web.Request) -> web.Response:
    backend = request.app[BACKEND]
    ready, checks = backend.readiness()
    probe: StoreProbe | None = request.app.get(PROBE)
    if probe is not None:  # the store's answer now, not the processing thread's last one
        checks["store"] = await probe.check()
        ready = backend.started and "checked" not in checks and checks["store"] == "ok" \
            and checks.get("broker", "ok") == "ok"
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
