"""Readiness tells the truth (issue 40, finding 7): `/readyz` answered 200 `store: ok` while
the ClickHouse server it writes to was stopped (the last check of the processing thread,
every 5 s, stood in for the store). Now the probe asks the store on each request, bounded in
time, and says why it is not ready; the worker's `/healthz` too (it only knew what its own
writes had last seen, so an idle worker with a stopped store was "ok").

Against the dev ClickHouse server (jobtrail.dev.clickhouse), one per test, since the test
stops it: ready; paused (SIGSTOP: a request hangs) not ready within the probe's bound, with
why; resumed, ready; stopped (connection refused), not ready, with why; started again on the
same port and data, ready."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from jobtrail.dev import clickhouse as dev_clickhouse
from jobtrail.runtime import worker_http
from jobtrail.store.probe import StoreProbe
from tests.identity_kit import free_port, on_server, serving

Ask = Callable[[], Awaitable[tuple[int, dict[str, Any]]]]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[list[dev_clickhouse.Server]]:
    held = [dev_clickhouse.start(tmp_path / "clickhouse")]
    yield held
    dev_clickhouse.stop(held[-1])


def _start_again(server: dev_clickhouse.Server) -> dev_clickhouse.Server:
    """The same server again: its port, its data and its password (`dev_clickhouse.start`
    would pick a new password, which the running app does not have)."""
    log = (server.directory / "server.log").open("ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobtrail.dev.clickhouse", str(server.directory / "engine"),
         str(server.port)], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        start_new_session=True,
        env={**os.environ, "JOBTRAIL_DEV_CLICKHOUSE_PASSWORD": server.password})
    log.close()
    again = dev_clickhouse.Server(proc.pid, server.port, server.directory, server.password)
    for _ in range(600):  # bounded: up to 60 s for the port to answer /ping
        if dev_clickhouse._ready(server.port):
            return again
        assert proc.poll() is None, (server.directory / "server.log").read_text()[-2000:]
        time.sleep(0.1)
    dev_clickhouse.stop(again)
    raise AssertionError("the dev ClickHouse server did not come back in 60 s")


async def _through_an_outage(held: list[dev_clickhouse.Server], ask: Ask) -> list[str]:
    """Ready, paused, resumed, stopped, started again: what `ask` answered each time."""
    seen: list[str] = []

    async def expect(status: int, store: str) -> None:
        got, body = await ask()
        assert got == status, body
        assert str(body["checks"]["store"]).startswith(store), body
        seen.append(f"{got} {body['checks']['store']}")

    await expect(200, "ok")
    os.kill(held[-1].pid, signal.SIGSTOP)  # the server stops answering: requests hang
    try:
        await expect(503, "unavailable: ")
        assert "timed out" in seen[-1] or "no answer" in seen[-1], seen[-1]
    finally:
        os.kill(held[-1].pid, signal.SIGCONT)
    await expect(200, "ok")
    dev_clickhouse.stop(held[-1])  # gone: connection refused
    await expect(503, "unavailable: ")
    assert held[-1].password not in seen[-1]  # the answer is public
    held.append(await asyncio.to_thread(_start_again, held[-1]))
    await expect(200, "ok")
    return seen


def test_readyz_asks_the_store_and_says_why_it_is_not_ready(
        server: list[dev_clickhouse.Server], tmp_path: Path) -> None:
    settings = on_server(server[0].dsn, tmp_path / "home", JOBTRAIL_DATABASE="readiness")

    async def main() -> list[str]:
        async with serving(settings) as base, aiohttp.ClientSession(base) as client:
            async def ask() -> tuple[int, dict[str, Any]]:
                answer = await client.get("/readyz", timeout=aiohttp.ClientTimeout(total=30))
                return answer.status, await answer.json()

            seen = await _through_an_outage(server, ask)
            healthz = await client.get("/healthz")
            assert healthz.status == 200
            return seen

    seen = asyncio.run(main())
    assert len(seen) == 5, seen


def test_the_workers_healthz_asks_the_store_too(server: list[dev_clickhouse.Server]) -> None:
    """An idle worker (no write of its own in flight) whose store is stopped was healthy."""
    port = free_port()
    probe = StoreProbe.of(server[0].dsn, "default")
    assert probe is not None and StoreProbe.of("chdb:///x", "default") is None

    async def main() -> list[str]:
        runner = await worker_http.serve("127.0.0.1", port, lambda: {"events/0": 7}, probe)
        try:
            async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as client:
                async def ask() -> tuple[int, dict[str, Any]]:
                    answer = await client.get("/healthz",
                                              timeout=aiohttp.ClientTimeout(total=30))
                    body = await answer.json()
                    assert body["partitions"] == {"events/0": 7}
                    return answer.status, body

                return await _through_an_outage(server, ask)
        finally:
            await runner.cleanup()

    seen = asyncio.run(main())
    assert len(seen) == 5, seen
