"""The MCP server under test, reached with the SDK's own client: over stdio (`jobtrail mcp`
spawned as a subprocess) and over streamable HTTP (uvicorn on a loopback port in a thread),
both over one store (the dev ClickHouse server, so the subprocess and the test share it)."""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from jobtrail.config import Settings
from jobtrail.mcp.evidence import Evidence

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class HttpServer:
    """`jobtrail.mcp.server.http_app` under uvicorn on 127.0.0.1, in a thread of its own."""

    def __init__(self, evidence: Evidence, settings: Settings) -> None:
        import uvicorn

        from jobtrail.mcp.server import http_app

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        config = uvicorn.Config(http_app(evidence, settings, "127.0.0.1"), host="127.0.0.1",
                                port=self.port, log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> HttpServer:
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            assert time.monotonic() < deadline, "the MCP HTTP server did not start in 60 s"
            assert self.thread.is_alive(), "the MCP HTTP server thread died"
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join(30)


def stdio_env(dsn: str, database: str, home: Path, topology: Path | None,
              extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBTRAIL_")}
    env |= {"PYTHONPATH": str(ROOT), "JOBTRAIL_CLICKHOUSE": dsn, "JOBTRAIL_DATABASE": database,
            "JOBTRAIL_HOME": str(home)}
    if topology is not None:
        env["JOBTRAIL_TOPOLOGY"] = str(topology)
    return env | (extra or {})


@asynccontextmanager
async def client(transport: str, *, url: str = "", env: dict[str, str] | None = None,
                 token: str = "") -> AsyncIterator[Any]:
    """The SDK's `Client` over `transport` ("stdio": spawn `jobtrail mcp`; "http": `url`)."""
    import httpx2
    from mcp import Client, StdioServerParameters
    from mcp.client.streamable_http import streamable_http_client

    if transport == "stdio":
        params = StdioServerParameters(command=sys.executable,
                                       args=["-m", "jobtrail.cli", "mcp"], env=env or {},
                                       cwd=str(ROOT))
        async with Client(params, read_timeout_seconds=120) as c:
            yield c
        return
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx2.AsyncClient(headers=headers, timeout=120) as http, \
            Client(streamable_http_client(url, http_client=http),
                   read_timeout_seconds=120) as c:
        yield c


async def call(c: Any, name: str, args: dict[str, Any]) -> tuple[bool, Any]:
    """(ok, structured answer) or (False, the refusal's text)."""
    result = await c.call_tool(name, args)
    text = result.content[0].text if result.content else ""
    if result.is_error:
        return False, text
    assert result.structured_content == json.loads(text), "text and structure disagree"
    return True, result.structured_content


async def pages(c: Any, name: str, args: dict[str, Any], key: str,
                bound: int = 1000) -> list[Any]:
    """Every item of a paged answer, following next_cursor (bounded)."""
    out: list[Any] = []
    cursor = None
    for _ in range(bound):
        ok, body = await call(c, name, {**args, **({"cursor": cursor} if cursor else {})})
        assert ok, body
        out += body[key]
        cursor = body["page"]["next_cursor"]
        if cursor is None:
            return out
    raise AssertionError(f"more than {bound} pages")
