"""`jobtrail dashboards build|check|publish` and `jobtrail access grant`."""

from __future__ import annotations

import json
import os
import warnings
from typing import Any

import click

from jobtrail.config import Settings

warnings.filterwarnings("ignore", category=DeprecationWarning, module="dashboards")
warnings.filterwarnings("ignore", message="Prefer using dashboardv2", category=DeprecationWarning)


@click.group("dashboards")
def dashboards() -> None:
    """Grafana dashboards as code (dashboards/*.py -> dashboards/json)."""


@dashboards.command("build")
def build() -> None:
    """Write dashboards/json/*.json from the builders."""
    from dashboards.build import write

    for path in write():
        click.echo(f"wrote {path}")


@dashboards.command("check")
def check() -> None:
    """Offline checks: committed = built, SDK round trip, lint (exit 1 on a problem)."""
    from dashboards.build import built, committed
    from dashboards.check import lint, roundtrip

    boards = built()
    problems = [] if committed() == boards else ["dashboards/json is stale: run "
                                                 "`jobtrail dashboards build`"]
    for name, board in boards.items():
        problems += [f"{name}: {p}" for p in roundtrip(board) + lint(board)]
    for problem in problems:
        click.echo(problem, err=True)
    if problems:
        raise SystemExit(1)
    click.echo(f"{len(boards)} dashboards: built JSON committed, SDK round trip clean, "
               "targets lint clean")


@dashboards.command("publish")
@click.option("--url", required=True, help="Grafana base URL")
@click.option("--token", envvar="GRAFANA_TOKEN", required=True,
              help="Service-account token (or $GRAFANA_TOKEN)")
@click.option("--clickhouse-url", default="http://clickhouse:8123",
              help="The ClickHouse HTTP endpoint Grafana reaches")
@click.option("--username", default="grafana_ro", help="Read-only ClickHouse user")
@click.option("--no-datasource", is_flag=True, help="Dashboards only")
@click.option("--jobtrail-url", envvar="JOBTRAIL_PUBLIC_URL", default="",
              help="Where users reach jobtrail's API and pages (the postmortem links; "
                   "default http://localhost:8080, or $JOBTRAIL_PUBLIC_URL)")
@click.pass_context
def publish(ctx: click.Context, url: str, token: str, clickhouse_url: str, username: str,
            no_datasource: bool, jobtrail_url: str) -> None:
    """Create or update the folder, the data source and the dashboards (idempotent)."""
    from dashboards.build import committed
    from dashboards.common import with_jobtrail_url
    from jobtrail.views.grafana import datasource_body
    from jobtrail.views.grafana import publish as push

    settings: Settings = ctx.obj
    source = None if no_datasource else datasource_body(url=clickhouse_url,
                                                        database=settings.database,
                                                        username=username)
    boards = committed()
    if jobtrail_url:
        if not jobtrail_url.startswith(("http://", "https://")):
            raise click.BadParameter("an http(s) URL", param_hint="--jobtrail-url")
        boards = {name: with_jobtrail_url(b, jobtrail_url.rstrip("/"))
                  for name, b in boards.items()}
    done = push(url, token, boards, source)
    for item in done.created:
        click.echo(f"created {item}")
    click.echo(f"published {', '.join(done.dashboards)} to folder {done.folder}"
               + (f" with data source {done.datasource}" if done.datasource else ""))


@click.group("access")
def access() -> None:
    """Per-team read-only access for Grafana on a ClickHouse server."""


@access.command("grant")
@click.argument("team")
@click.option("--projects", required=True, help="Comma-separated projects the team may read")
@click.option("--password-env", default="JOBTRAIL_GRANT_PASSWORD", show_default=True,
              help="Environment variable holding the new user's password")
@click.option("--clickhouse-url", default="http://clickhouse:8123",
              help="Where Grafana reaches ClickHouse (for the data source it prints)")
@click.option("--dry-run", is_flag=True, help="Print the SQL and the data source, change nothing")
@click.pass_context
def grant(ctx: click.Context, team: str, projects: str, password_env: str, clickhouse_url: str,
          dry_run: bool) -> None:
    """Create TEAM's read-only user with row policies limiting every table Grafana reads to
    PROJECTS, and print the matching Grafana data source."""
    from jobtrail.views.grafana import datasource_body
    from jobtrail.views.grafana import grant as make_grant

    settings: Settings = ctx.obj
    try:
        g = make_grant(team, projects.split(","), settings.database)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    source: dict[str, Any] = datasource_body(
        url=clickhouse_url, database=settings.database, username=g.user,
        uid=f"jobtrail-clickhouse-{team}"[:40], name=f"jobtrail ({team})",
        password_ref=f"${password_env}")
    if dry_run:
        for statement in g.statements(f"'<${password_env}>'"):
            click.echo(statement + ";")
        click.echo(json.dumps(source, indent=2))
        return
    if not settings.clickhouse_dsn:
        raise click.ClickException(
            "per-team access needs a ClickHouse server (JOBTRAIL_CLICKHOUSE); in embedded "
            "mode jobtrail's own query layer binds every read to the caller's projects")
    password = os.environ.get(password_env, "")
    if len(password) < 12:
        raise click.ClickException(f"set ${password_env} to the new user's password "
                                   "(12 characters or more)")
    from jobtrail.app import open_store

    store = open_store(settings)
    quoted = "'" + password.replace("\\", "\\\\").replace("'", "\\'") + "'"
    for statement in g.statements(quoted):
        store.client.command(statement)
    click.echo(f"granted {g.user} read access to {', '.join(g.projects)}; data source:")
    click.echo(json.dumps(source, indent=2))
