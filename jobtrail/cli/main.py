"""The `jobtrail` command line. Embedded by default; `JOBTRAIL_KAFKA` selects cluster mode."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import click

from jobtrail.cli.common import _parse_when, _settings, _store, count
from jobtrail.config import Settings
from jobtrail.variables import SettingError


class SettingsRefused(click.ClickException):
    """A setting refused (`jobtrail.variables.SettingError`): one line naming the variable,
    exit status 2 (a usage error, as click's own)."""

    exit_code = 2


class _Group(click.Group):
    """Turns the errors a user can act on (a setting refused, a home held by another
    process) into one line."""

    def invoke(self, ctx: click.Context) -> Any:
        from aiokafka.errors import KafkaConnectionError

        from jobtrail.runtime.home import HomeInUse

        try:
            return super().invoke(ctx)
        except SettingError as exc:
            raise SettingsRefused(str(exc)) from None
        except HomeInUse as exc:
            raise click.ClickException(str(exc)) from None
        except KafkaConnectionError as exc:
            raise click.ClickException(f"cannot reach the Kafka broker "
                                       f"(JOBTRAIL_KAFKA): {exc}") from None


@click.group(cls=_Group)
@click.option("--home", type=click.Path(path_type=Path), default=None,
              help="State directory (embedded chDB and log); default $JOBTRAIL_HOME or ./var")
@click.pass_context
def main(ctx: click.Context, home: Path | None) -> None:
    """jobtrail: one cross-system timeline per training job."""
    from jobtrail.logs import redact_log_records
    from jobtrail.views.terminal import guard

    redact_log_records()
    sys.stdout, sys.stderr = guard(sys.stdout), guard(sys.stderr)  # text, never control
    settings = Settings.from_env(os.environ)  # a SettingError: one line, exit 2 (_Group)
    if home is not None:
        settings = settings.with_(home=home)
    ctx.obj = settings


@main.command()
@click.argument("job")
@click.option("--project", required=True, help="Project the job belongs to (always required)")
@click.option("--attempt", type=count(0, 10**6), default=None)
@click.option("--since", default=None, help="ISO time; only rows at or after it")
@click.option("--until", default=None, help="ISO time; only rows at or before it")
@click.option("--colour/--no-colour", "colour", default=None,
              help="ANSI colours (default: when stdout is a terminal)")
@click.option("--json", "as_json", is_flag=True, help="Rows as JSON lines")
@click.option("--png", "png", type=click.Path(path_type=Path), default=None,
              help="Draw the job dashboard's panels to this PNG instead")
@click.pass_context
def timeline(ctx: click.Context, job: str, project: str, attempt: int | None, since: str | None,
             until: str | None, colour: bool | None, as_json: bool,
             png: Path | None = None) -> None:
    """Show JOB's cross-system timeline, grouped by attempt."""
    from jobtrail.app import open_store
    from jobtrail.views.render import render

    store = open_store(_settings(ctx))
    if png is not None:
        from dashboards.png import render as draw

        try:
            counts = draw(store, project, job, png, str(attempt) if attempt else "all")
        except ValueError as exc:
            raise click.ClickException(str(exc)) from None
        click.echo(f"wrote {png}: " + ", ".join(f"{v} {k}" for k, v in counts.items()))
        return
    rows = store.timeline(project, job, attempt=attempt, since=_parse_when(since),
                          until=_parse_when(until))
    if as_json:
        for row in rows:
            click.echo(json.dumps(row, default=str))
        return
    use_colour = sys.stdout.isatty() if colour is None else colour
    from jobtrail.app import load_topology
    from jobtrail.store.queries import wiring
    from jobtrail.views.completeness import of_attempts

    attempts = store.attempts(project, job)
    shown = [a for a in attempts if attempt is None or a.attempt == attempt] if rows else []
    sources = of_attempts(store, wiring(store, load_topology(_settings(ctx))), shown)
    click.echo(render(job, rows, attempts, colour=use_colour,
                      incidents=store.incidents_of_events(
                          project, [r["event_id"] for r in rows]),
                      completeness=sources), nl=False)


@main.command()
@click.option("--colour/--no-colour", "colour", default=None)
@click.pass_context
def demo(ctx: click.Context, colour: bool | None) -> None:
    """Load the bundled 64-node sample scenario (embedded) and show its timeline."""
    from ingest.redact import redact_text
    from jobtrail.cli import incidents as cli_incidents
    from jobtrail.learn import sample
    from processors.topology import Topology
    from schemas.topology import TopologyFile

    settings = _settings(ctx).with_(kafka="")
    # a server's DSN carries its password (the dev server's always does): never echo it
    click.echo(f"loading the sample scenario into {redact_text(settings.dsn)}")
    wiring = Topology.from_file(TopologyFile.model_validate(sample.topology()))
    from jobtrail.cli.ingest import _ingest_text

    _ingest_text(settings, sample.jsonl(), producer="sample", origin="sample", topology=wiring)
    ctx.invoke(timeline, job=sample.JOB, project=sample.PROJECT, attempt=None, since=None,
               until=None, colour=colour, as_json=False)
    click.echo("")
    ctx.invoke(cli_incidents.incidents, projects=(), status="", as_json=False,
               everything=False)
    worst = max(_store(settings).incidents(None), key=lambda r: r["lost_gpu_hours"],
                default=None)
    if worst is not None:
        click.echo("")
        ctx.invoke(cli_incidents.show, incident_id=worst["incident_id"], projects=(),
                   as_json=False)


@main.command()
@click.option("--synthetic", type=count(0, 10**7), default=0,
              help="Instead of the scenario, N synthetic load records with fixed ids")
@click.pass_context
def sample_events(ctx: click.Context, synthetic: int) -> None:
    """Print the bundled sample scenario as JSON lines (to pipe into `ingest -`)."""
    from jobtrail.learn import sample
    if synthetic:
        for record in sample.synthetic(synthetic):
            click.echo(json.dumps(record))
        return
    click.echo(sample.jsonl(), nl=False)


@main.command()
@click.pass_context
def drain(ctx: click.Context) -> None:
    """Process what the embedded log still holds (e.g. after a crash)."""
    from jobtrail.app import open_runtime

    started = time.monotonic()
    from jobtrail.cli.ingest import _summary

    runtime = open_runtime(_settings(ctx))
    try:
        result = runtime.drain()
    finally:
        runtime.close()
    click.echo(_summary(result, started))


@main.command()
@click.option("--host", default=None, callback=lambda ctx, param, value: _host(value),
              help="Listen address (default $JOBTRAIL_HTTP_HOST or 127.0.0.1); beyond "
                   "loopback only with a credential or JOBTRAIL_ALLOW_UNAUTHENTICATED=1")
@click.option("--port", type=count(1, 65535), default=None)
@click.pass_context
def serve(ctx: click.Context, host: str | None, port: int | None) -> None:
    """Run the HTTP API and the processors (embedded, or cluster mode with JOBTRAIL_KAFKA)."""
    from jobtrail.http import serve as run_server

    settings = _settings(ctx)
    settings = settings.with_(http_host=host or settings.http_host,
                              http_port=port or settings.http_port)
    settings.check_listener()
    settings.check_files()
    run_server(settings)


def _host(value: str | None) -> str | None:
    from jobtrail.variables.kinds import Host

    try:
        return None if value is None else Host().parse(value)
    except ValueError as exc:
        raise click.BadParameter(f"{exc}, got {value!r}") from None


@main.command()
@click.option("--loglevel", default="warning")
@click.pass_context
def worker(ctx: click.Context, loglevel: str) -> None:
    """Run the Faust stream worker (cluster mode; needs JOBTRAIL_KAFKA)."""
    settings = _settings(ctx)
    if not settings.cluster_mode:
        raise click.UsageError("the worker needs a broker: set JOBTRAIL_KAFKA=host:port")
    settings.check_files()
    from jobtrail.runtime.faust_app import run_worker

    sys.argv = [sys.argv[0], "worker"]
    run_worker(settings, loglevel)


@main.command()
@click.pass_context
def migrate(ctx: click.Context) -> None:
    """Apply the ClickHouse DDL (idempotent; also done at every start)."""
    from jobtrail.app import open_store

    settings = _settings(ctx)
    click.echo(f"schema up to date on {settings.database}")
    open_store(settings)


def _wiring(settings: Settings) -> Any:
    from jobtrail.app import load_topology, open_store
    from jobtrail.store.queries import wiring

    store = open_store(settings)
    return store, wiring(store, load_topology(settings))


@main.command()
@click.option("--node", default="")
@click.option("--switch", default="")
@click.option("--filesystem", default="")
@click.option("--at", "at", required=True, help="ISO time")
@click.option("--project", "projects", multiple=True, required=True,
              help="Projects to look in (repeatable); reads are always project-bound")
@click.option("--cluster", default="", help="The cluster (two can share node names)")
@click.pass_context
def where(ctx: click.Context, node: str, switch: str, filesystem: str, at: str,
          projects: tuple[str, ...], cluster: str) -> None:
    """Which job attempts were on a node, under a switch or using a filesystem at a time."""
    from jobtrail.store.queries import attempts_under

    if not (node or switch or filesystem):
        raise click.UsageError("give --node, --switch or --filesystem")
    store, topology = _wiring(_settings(ctx))
    when = _parse_when(at)
    assert when is not None
    for a in attempts_under(store, topology, projects, when, node=node, switch=switch,
                            filesystem=filesystem, cluster=cluster):
        click.echo(f"{a.cluster} {a.project} {a.job_id} attempt {a.attempt} {a.state} "
                   f"{len(a.nodes)} nodes started {a.started_at:%Y-%m-%d %H:%M:%S}")


@main.command()
@click.argument("job")
@click.argument("attempt", type=count(0, 10**6))
@click.option("--project", required=True)
@click.pass_context
def attempt(ctx: click.Context, job: str, attempt: int, project: str) -> None:
    """Nodes, switches, links, filesystems and checkpoints of one attempt (JSON)."""
    from jobtrail.store.queries import resources

    store, topology = _wiring(_settings(ctx))
    found = resources(store, topology, project, job, attempt)
    if found is None:
        raise click.ClickException(f"no attempt {attempt} of {job} in project {project}")
    a = found.attempt
    click.echo(json.dumps({
        "job_id": a.job_id, "attempt": a.attempt, "state": a.state, "nodes": list(a.nodes),
        "gpus": a.gpus, "switches": found.switches, "links": found.links,
        "filesystems": found.filesystems, "mounts": list(a.mounts),
        "checkpoints": found.checkpoints, "image": a.image, "code_version": a.code_version,
        "data_version": a.data_version}, default=str, indent=2))


@main.command()
@click.argument("name")
@click.option("--project", "projects", multiple=True, required=True)
@click.option("--since", default=None)
@click.option("--until", default=None)
@click.option("--json", "as_json", is_flag=True, help="Rows as JSON lines")
@click.option("--cluster", default="", help="The cluster (two can share node names)")
@click.pass_context
def entity(ctx: click.Context, name: str, projects: tuple[str, ...], since: str | None,
           until: str | None, as_json: bool = False, cluster: str = "") -> None:
    """What happened on an entity: node, GPU, NIC, switch, port or filesystem (a table;
    --json for JSON lines)."""
    from jobtrail.cli.beside import Reader
    from jobtrail.views.show import entity_table

    rows = Reader(_settings(ctx)).entity_timeline(
        list(projects), name, since=_parse_when(since), until=_parse_when(until),
        cluster=cluster)
    if as_json:
        for row in rows:
            click.echo(json.dumps(row, default=str))
        return
    click.echo(entity_table(name, rows), nl=False)


@main.command()
@click.pass_context
def stats(ctx: click.Context) -> None:
    """Row counts per table (FINAL and raw), duplicate event ids, and where each worker
    shard's saved state stands, as JSON."""
    from jobtrail.app import open_store

    store = open_store(_settings(ctx))
    tables = ("events", "job_timeline", "job_attempts", "dead_letters")
    click.echo(json.dumps({
        "final": {t: store.count(t) for t in tables},
        "raw": {t: store.count(t, final=False) for t in tables},
        "duplicate_event_ids": store.duplicate_ids(),
        "worker_state": {f"{w['app_id']} {w['shard']}": dict(w["positions"])
                         for w in store.worker_states()},
    }, sort_keys=True))


@main.command("dead-letters")
@click.option("--limit", type=count(1, 100_000), default=50)
@click.pass_context
def dead_letters(ctx: click.Context, limit: int) -> None:
    """List rejected inputs with stage, reason and field."""
    from jobtrail.app import open_store

    for row in open_store(_settings(ctx)).dead_letters(limit):
        click.echo(json.dumps(row, default=str))


def _register() -> None:
    from jobtrail.cli import (
        alerts,
        collect,
        dev,
        drill,
        grafana,
        incidents,
        ingest,
        mcp,
        postmortem,
        report,
        rules,
        schema,
        topology,
    )

    main.add_command(dev.dev)
    main.add_command(ingest.ingest)
    main.add_command(grafana.dashboards)
    main.add_command(grafana.access)
    main.add_command(incidents.incidents)
    main.add_command(incidents.incident)
    main.add_command(incidents.replay)
    main.add_command(postmortem.postmortem)
    main.add_command(postmortem.followups)
    main.add_command(postmortem.scenario)
    main.add_command(topology.topology)
    main.add_command(rules.rules)
    main.add_command(collect.collect)
    main.add_command(report.report)
    for command in alerts.COMMANDS:
        main.add_command(command)
    main.add_command(drill.drill)
    main.add_command(mcp.mcp)
    main.add_command(schema.schema)


_register()

