"""`jobtrail mcp`: the MCP server over stdio or streamable HTTP, read-only.

Built on the SDK's low-level `Server` so that the tools' schemas are ours (`tools.py`: unknown
fields refused, bounds and zones checked) and every refusal names its field. Who is asking:

- stdio: one principal for the process, from `--token` / `JOBTRAIL_MCP_TOKEN` (a configured
  API token), or the local operator when no credential of any kind is configured, as the
  CLI is; with credentials configured and no token the server refuses to start;
- streamable HTTP: the bearer token of each request, as the HTTP API reads it
  (`jobtrail.http.common.known`); a request without a known token is answered 401 before it
  reaches the protocol. Loopback by default, with the SDK's DNS-rebinding guard.

Store reads run on one executor thread (chDB's client is not shared between threads).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from jobtrail.config import Settings
from jobtrail.http.common import dumps, known
from jobtrail.identity import LOCAL, Principal
from jobtrail.mcp.evidence import Evidence
from jobtrail.mcp.refusal import Refusal
from jobtrail.mcp.tools import TOOLS

log = logging.getLogger("jobtrail.mcp")

INSTRUCTIONS = (
    "jobtrail holds one cross-system timeline per GPU training job and one explained incident "
    "per failure. Start with list_incidents or job_timeline; every answer cites the event ids "
    "and incident-log seqs it rests on (cites) and links the Grafana boards and the API "
    "(links) where a claim can be checked. completeness says which sources a timeline lacks; "
    "an incident's cause says when it rests on incomplete evidence. Large answers page: pass "
    "page.next_cursor back as cursor with the same arguments. Nothing here changes anything.")

Who = Callable[[Any], Principal]


class Unauthorised(Exception):
    pass


def stdio_principal(settings: Settings, token: str) -> Principal:
    """The principal of a stdio server: its token's, or the local operator when no
    credential is configured; raises Unauthorised otherwise."""
    if token:
        found = known(settings.api_tokens, token)
        if found is None:
            raise Unauthorised("--token (or JOBTRAIL_MCP_TOKEN) is not one of "
                               "JOBTRAIL_API_TOKENS")
        return found
    if settings.authenticated:
        raise Unauthorised("credentials are configured (JOBTRAIL_API_TOKENS, OIDC or an auth "
                           "proxy): give the agent's token with --token or JOBTRAIL_MCP_TOKEN")
    return LOCAL


def bearer_principal(settings: Settings, authorization: str) -> Principal | None:
    """The principal of an HTTP request's `Authorization` header (None: refused)."""
    if not settings.authenticated:
        return LOCAL
    scheme, _, presented = authorization.partition(" ")
    return known(settings.api_tokens, presented) if scheme.lower() == "bearer" else None


def build(evidence: Evidence, who: Who) -> Any:
    """The low-level server with the read-only tools, answering as `who(ctx)`."""
    import mcp_types as types
    from mcp.server.lowlevel import Server

    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mcp-store")
    listed = [types.Tool(name=t.name, description=t.description, input_schema=t.schema(),
                         annotations=types.ToolAnnotations(
                             title=t.name.replace("_", " "), read_only_hint=True,
                             destructive_hint=False, idempotent_hint=True,
                             open_world_hint=False))
              for t in TOOLS]

    async def list_tools(ctx: Any, params: Any) -> Any:
        return types.ListToolsResult(tools=listed)

    async def call_tool(ctx: Any, params: Any) -> Any:
        def text(message: str, error: bool, structured: Any = None) -> Any:
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=message)],
                structured_content=structured, is_error=error)

        try:
            principal = who(ctx)
            loop = asyncio.get_running_loop()
            answer = await loop.run_in_executor(
                executor, lambda: evidence.call(params.name, dict(params.arguments or {}),
                                                principal))
        except Refusal as exc:
            return text(str(exc), True)
        except Unauthorised as exc:
            return text(f"authorization: {exc}", True)
        except Exception:
            log.exception("tool %s failed", params.name)
            return text("internal error (logged by the server)", True)
        body = json.loads(dumps(answer))
        return text(json.dumps(body, indent=1, ensure_ascii=False), False, body)

    return Server("jobtrail", version=_version(), instructions=INSTRUCTIONS,
                  on_list_tools=list_tools, on_call_tool=call_tool)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("jobtrail")
    except PackageNotFoundError:
        return "0"


async def serve_stdio(evidence: Evidence, principal: Principal) -> None:
    from mcp.server.stdio import stdio_server

    server = build(evidence, lambda ctx: principal)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def http_app(evidence: Evidence, settings: Settings, host: str) -> Any:
    """The streamable HTTP app at /mcp behind the bearer gate (ASGI)."""

    def who(ctx: Any) -> Principal:
        headers = getattr(ctx.request, "headers", None)
        found = bearer_principal(settings, headers.get("authorization", "") if headers
                                 else "")
        if found is None:  # the gate refused it already; never a wider answer
            raise Unauthorised("missing or unknown bearer token")
        return found

    server = build(evidence, who)
    app = server.streamable_http_app(host=host)
    return BearerGate(app, settings)


class BearerGate:
    """401 for an HTTP request without a known bearer token (when credentials are
    configured), before the protocol sees it."""

    def __init__(self, app: Any, settings: Settings) -> None:
        self.app, self.settings = app, settings

    async def __call__(self, scope: dict[str, Any], receive: Callable[[], Awaitable[Any]],
                       send: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
        if scope["type"] == "http" and self.settings.authenticated:
            header = dict(scope.get("headers") or ()).get(b"authorization", b"")
            if bearer_principal(self.settings, header.decode("latin-1")) is None:
                body = json.dumps({"error": "missing or unknown bearer token"}).encode()
                await send({"type": "http.response.start", "status": 401, "headers": [
                    (b"content-type", b"application/json"),
                    (b"www-authenticate", b'Bearer realm="jobtrail"'),
                    (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def serve_http(evidence: Evidence, settings: Settings, host: str, port: int) -> None:
    import uvicorn

    config = uvicorn.Config(http_app(evidence, settings, host), host=host, port=port,
                            log_level="warning", lifespan="on")
    uvicorn.Server(config).run()
