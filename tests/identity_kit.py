"""The API in-process on a real loopback socket, with an incident to act on, for the identity
tests: one token per role on the incident's project, cookies handled by hand (aiohttp's jar
ignores cookies for IP hosts). `serving` starts the app as `jobtrail serve` does (its runtime
opened from the settings), so several instances on one ClickHouse server, or one stopped and
started again, are what several `serve` processes and a restart are."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from jobtrail.config import Settings
from jobtrail.http import RuntimeBackend, create_app
from jobtrail.learn import sample
from jobtrail.runtime.embedded import EmbeddedRuntime
from jobtrail.store import Store
from processors.topology import Topology
from schemas.topology import TopologyFile

PROJECT = "llm-pretrain"
ROLE_TOKENS = {
    "viewer": ("tok-viewer", "vic"),
    "responder": ("tok-responder", "rita"),
    "commander": ("tok-commander", "cy"),
    "admin": ("tok-admin", "ada"),
}
TOKENS: dict[str, tuple[str, ...]] = {
    token: (PROJECT, f"user:{user}", f"role:{role}", f"label:{user}-key")
    for role, (token, user) in ROLE_TOKENS.items()}
TOKENS["tok-ana"] = (PROJECT, "user:ana", "role:commander")
TOKENS["tok-other"] = ("vision", "user:olga", "role:admin")


def bearer(role_or_token: str) -> dict[str, str]:
    token = ROLE_TOKENS[role_or_token][0] if role_or_token in ROLE_TOKENS else role_or_token
    return {"Authorization": f"Bearer {token}"}


def backend_with_incident(store: Store, home: Path) -> RuntimeBackend:
    """The embedded runtime on the test store, holding one open GPU incident of PROJECT."""
    from tests.processors.incident_kit import at, ev, started

    wiring = Topology.from_file(TopologyFile.model_validate(sample.topology()))
    backend = RuntimeBackend(EmbeddedRuntime(Settings(home=home), topology=wiring, store=store))
    backend.runtime.submit([
        started("j", 1, at(0), ["node-001", "node-002"]),
        ev("node.xid", at(5), scope="gpu", entity="node-001/gpu0", node="node-001",
           attributes={"xid": 79}),
        ev("job.worker_exited", at(5, 3), job="j", attempt=1, node="node-001",
           attributes={"rank": 0, "exit_code": 1})])
    backend.runtime.drain()
    return backend


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


Scenario = Callable[[aiohttp.ClientSession, str], Awaitable[None]]


def run(settings: Settings, backend: Any, scenario: Scenario, *,
        local_addr: tuple[str, int] | None = None, timeout_s: float = 240,
        port: int = 0) -> None:
    """Serve the app on 127.0.0.1 (`port`, or a free one) and run `scenario(client,
    base_url)` against it."""
    port = port or free_port()

    async def main() -> None:
        runner = web.AppRunner(create_app(settings, backend))
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        base = f"http://127.0.0.1:{port}"
        connector = aiohttp.TCPConnector(local_addr=local_addr) if local_addr else None
        try:
            async with aiohttp.ClientSession(base, connector=connector,
                                             cookie_jar=aiohttp.DummyCookieJar()) as client:
                await asyncio.wait_for(scenario(client, base), timeout=timeout_s)
        finally:
            await runner.cleanup()

    asyncio.run(main())


async def incident_id(client: aiohttp.ClientSession) -> str:
    listed = await (await client.get("/v1/incidents", headers=bearer("admin"))).json()
    (inc,) = listed["incidents"]
    return str(inc["incident_id"])


async def token_session(client: aiohttp.ClientSession, token: str) -> tuple[str, str, str]:
    """Sign in with a token through the page's form, as the page's browser (its Origin):
    (Cookie header, Set-Cookie, csrf)."""
    signed = await client.post("/ui/login", data={"token": token}, allow_redirects=False,
                               headers={"Origin": origin(client)})
    assert signed.status == 200, await signed.text()
    morsel = signed.cookies["jobtrail_session"]
    cookie = f"jobtrail_session={morsel.value}"
    me = await (await client.get("/v1/whoami", headers={"Cookie": cookie})).json()
    return cookie, signed.headers["Set-Cookie"], str(me["csrf"])


def origin(client: aiohttp.ClientSession) -> str:
    """The origin of the app a test client talks to (what its pages' browser sends)."""
    base = client._base_url  # the session's own base, set by `run`
    assert base is not None
    return f"{base.scheme}://{base.host}:{base.port}"


@contextlib.asynccontextmanager
async def serving(settings: Settings, backend: Any = None, port: int = 0,
                  ) -> AsyncIterator[str]:
    """The app on 127.0.0.1 (`port`, or a free one) until the block ends; with no `backend`,
    its runtime is opened from `settings` as `jobtrail serve` opens it."""
    port = port or free_port()
    runner = web.AppRunner(create_app(settings, backend))
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", port).start()
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def on_server(dsn: str, home: Path, **env: str) -> Settings:
    """Settings of one API process whose store is the ClickHouse server at `dsn`, in the
    database `env["JOBTRAIL_DATABASE"]` (share it to share the store)."""
    return Settings.from_env({"JOBTRAIL_HOME": str(home), "JOBTRAIL_CLICKHOUSE": dsn,
                              "JOBTRAIL_ALERTS_INTERVAL_S": "0", **env})


def database() -> str:
    return f"t_{uuid.uuid4().hex[:12]}"
