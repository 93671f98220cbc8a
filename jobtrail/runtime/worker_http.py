"""The worker's probes and metrics on `JOBTRAIL_WORKER_PORT`: what an orchestrator and
Prometheus need from a process that serves no API.

- `/livez`: the event loop answers.
- `/healthz` (and `/readyz`): 200 while the store answers, 503 with why otherwise, with the
  partitions it holds and their positions. Two things say the store is away: the worker's own
  writes (from their first failed try until one succeeds: the worker is then backing off
  without committing, `jobtrail.store.retry.STATUS`), and the store asked now (`SELECT 1` on
  the probe's own client with 2-second timeouts, `jobtrail.store.probe`), so an idle worker
  whose store stopped is not ready either. Neither waits for the store thread, which may be
  blocked in a retry.
- `/metrics`: counters and gauges in Prometheus text format (`jobtrail.telemetry`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from jobtrail import telemetry
from jobtrail.store.probe import StoreProbe
from jobtrail.store.retry import STATUS


def _json(status: int, body: dict[str, Any]) -> web.Response:
    return web.json_response(body, status=status)


async def serve(host: str, port: int, describe: Callable[[], dict[str, Any]],
                probe: StoreProbe | None = None) -> web.AppRunner:
    """Start the probes on the running loop; `describe` says what the worker holds, `probe`
    asks its store (a ClickHouse server)."""

    async def livez(request: web.Request) -> web.Response:
        return _json(200, {"status": "ok"})

    async def healthz(request: web.Request) -> web.Response:
        since = datetime.fromtimestamp(STATUS.since, tz=UTC).isoformat()
        store = "ok" if STATUS.up else (
            f"unavailable for {time.time() - STATUS.since:.0f} s (since {since}), retrying "
            f"without committing: {STATUS.error}")
        if store == "ok" and probe is not None:
            store = await probe.check()
        up = store == "ok"
        return _json(200 if up else 503, {
            "status": "ok" if up else "unavailable", "mode": "worker",
            "checks": {"store": store}, "partitions": describe()})

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text=telemetry.prometheus(), content_type="text/plain")

    app = web.Application()
    app.router.add_get("/livez", livez)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", healthz)
    app.router.add_get("/metrics", metrics)
    if probe is not None:
        async def close(app: web.Application) -> None:
            probe.close()

        app.on_cleanup.append(close)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
