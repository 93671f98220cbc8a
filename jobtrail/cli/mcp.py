"""`jobtrail mcp`: the read-only MCP server for investigation agents (docs/agents.md)."""

from __future__ import annotations

import click

from jobtrail.cli.common import _settings


@click.command("mcp")
@click.option("--transport", type=click.Choice(["stdio", "http"]), default="stdio",
              show_default=True, help="stdio (an agent spawns it) or streamable HTTP (/mcp)")
@click.option("--host", default="127.0.0.1", show_default=True, help="HTTP: address to bind")
@click.option("--port", type=int, default=8765, show_default=True, help="HTTP: port")
@click.option("--token", envvar="JOBTRAIL_MCP_TOKEN", default="",
              help="stdio: the agent's API token (one of JOBTRAIL_API_TOKENS; env "
                   "JOBTRAIL_MCP_TOKEN); over HTTP each request's bearer token is used")
@click.pass_context
def mcp(ctx: click.Context, transport: str, host: str, port: int, token: str) -> None:
    """Serve the timeline and incidents to an agent over MCP (read-only)."""
    import anyio

    from jobtrail.app import load_topology, open_store
    from jobtrail.mcp.evidence import Evidence
    from jobtrail.mcp.server import Unauthorised, serve_http, serve_stdio, stdio_principal
    from jobtrail.store.queries import wiring

    settings = _settings(ctx)
    principal = None
    if transport == "stdio":
        try:
            principal = stdio_principal(settings, token)
        except Unauthorised as exc:
            raise click.UsageError(str(exc)) from None
    elif token:
        raise click.UsageError("--token is for stdio; over HTTP each request's bearer token "
                               "is the credential")
    store = open_store(settings)
    evidence = Evidence(store, settings, lambda: wiring(store, load_topology(settings)))
    if principal is not None:
        anyio.run(serve_stdio, evidence, principal)
    else:
        click.echo(f"jobtrail mcp: streamable HTTP on http://{host}:{port}/mcp", err=True)
        serve_http(evidence, settings, host, port)
