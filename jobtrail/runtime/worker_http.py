"""The worker's probes and metrics on `JOBTRAIL_WORKER_PORT`: what an orchestrator and
Prometheus need from a process that serves no API.

- `/livez`: the event loop answers.
- `/healthz` (and `/readyz`): 200 while the store answers, 503 from its first failed try until
  it answers again (the worker is then backing off without committing), with the partitions it
  holds, their positions and the store's last error. The probe does no I/O of its own: the
  store thread may be blocked in a retry, and a probe must not wait for it.
- `/metrics`: counters and gauges in Prometheus text format (`jobtrail.telemetry`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from jobtrail import telemetry
from jobtrail.store.retry import STATUS


def _json(status: int, body: dict[str, Any]) -> web.Response:
    return web.json_response(body, status=status)


async def serve(host: str, port: int, describe: Callable[[], dict[str, Any]]) -> web.AppRunner:
    """Start the probes on the running loop; `describe` says what the worker holds."""

    async def livez(request: web.Request) -> web.Response:
        return _json(200, {"status": "ok"})

    async def healthz(request: web.Request) -> web.Response:
        since = datetime.fromtimestamp(STATUS.since, tz=UTC).isoformat()
        store = "ok" if STATUS.up else (
            f"unavailable for {time.time() - STATUS.since:.0f} s (since {since}), retrying "
            f"without committing: {STATUS.error}")
        return _json(200 if STATUS.up else 503, {
            "status": "ok" if STATUS.up else "unavailable", "mode": "worker",
            "checks": {"store": store}, "partitions": describe()})

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text=telemetry.prometheus(), content_type="text/plain")

    app = web.Application()
    app.router.add_get("/livez", livez)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", healthz)
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
