"""`jobtrail ingest`: canonical JSON or a source's own format through its adapter, with what
each adapter read, skipped and could not time said in the summary (docs/adapters.md)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from jobtrail.cli.common import _parse_when, _settings, count
from jobtrail.config import Settings


def _summary(result: Any, started: float) -> str:
    elapsed = time.monotonic() - started
    return (f"received {result.received}, stored {result.stored}, duplicates {result.duplicates}, "
            f"dead-lettered {len(result.dead_letters)}, timeline rows {result.timeline_rows} "
            f"in {elapsed:.2f} s")


def _print_dead_letters(letters: list[Any]) -> None:
    for letter in letters[:20]:
        where = f" field {letter.field!r}" if letter.field else ""
        click.echo(f"  dead letter [{letter.stage}] {letter.event_ref}{where}: {letter.reason}",
                   err=True)
    if len(letters) > 20:
        click.echo(f"  ... and {len(letters) - 20} more (jobtrail dead-letters)", err=True)


IMPORT_LATENESS_S = 7 * 86400.0
"""The lateness horizon of a file import when JOBTRAIL_LATENESS_S is not set."""


def _ingest_text(settings: Settings, raw: bytes | str, *, producer: str, origin: str,
                 topology: Any = None, adapter: str = "canonical",
                 context: dict[str, Any] | None = None) -> None:
    """Decode (one record per line or array element: one bad byte costs that record, never
    the file), submit durably, process, and say what happened to every record."""
    from jobtrail.app import open_runtime
    from schemas.dead_letters import DeadLetter

    started = time.monotonic()
    now = datetime.now(UTC)
    if not settings.lateness_given:
        # files come one after another, each spanning the same days: decided as the events'
        # times decide them (the replay budget and the journal's cap bound the cost)
        settings = settings.with_(lateness_s=IMPORT_LATENESS_S)
    runtime = open_runtime(settings, topology=topology)
    try:
        decoded = _decode(runtime, raw, producer=producer, origin=origin, adapter=adapter,
                          context=context, settings=settings, now=now)
        runtime.submit(decoded)
        result = runtime.drain()
    finally:
        runtime.close()
    if runtime.mode == "cluster":
        dead = [d for d in decoded if isinstance(d, DeadLetter)]
        click.echo(f"produced {len(decoded) - len(dead)} events and {len(dead)} dead letters "
                   f"to {settings.kafka} in {time.monotonic() - started:.2f} s")
        _print_dead_letters(dead)
        return
    click.echo(_summary(result, started))
    _print_dead_letters(result.dead_letters)


def _job_cluster(runtime: Any, context: dict[str, Any]) -> str:
    """The cluster a job log's lines belong to when `--cluster` is not given: the one cluster
    the job (`--project`/`--job`) already has attempts in, else `default`. A job's output
    pasted without its cluster then joins the job's timeline and incident, not a twin of
    the job in the `default` cluster."""
    store = getattr(getattr(runtime, "sink", None), "store", None)
    if store is None or not (context.get("project") and context.get("job_id")):
        return "default"
    clusters = {a.cluster for a in store.attempts(context["project"], context["job_id"])}
    if len(clusters) != 1:
        return "default"
    (cluster,) = clusters
    click.echo(f"cluster {cluster}: the one {context['project']}/{context['job_id']} has "
               "attempts in (--cluster to say otherwise)")
    return str(cluster)


def _decode(runtime: Any, raw: bytes | str, *, producer: str, origin: str, adapter: str,
            context: dict[str, Any] | None, settings: Settings, now: datetime) -> list[Any]:
    from ingest.canonical import decode

    if adapter == "canonical":
        return list(decode(raw, producer=producer, observed_at=now, origin=origin))
    from ingest.adapters import Context, registry, run_report

    context = dict(context or {})
    if context.get("cluster") is None:
        context["cluster"] = _job_cluster(runtime, context)
    ctx = Context(producer=producer, observed_at=now, origin=origin, **context)
    try:
        adapters = registry(settings.adapter_config())
    except (OSError, ValueError) as exc:
        raise click.ClickException(f"adapter mapping: {exc}") from None
    decoded, report = run_report(adapters[adapter], raw, ctx)
    if report.summary():
        click.echo(report.summary())
        for example in report.examples:
            click.echo(f"  skipped: {example}")
    return list(decoded)


def _formats() -> list[str]:
    from ingest.adapters import registry

    return ["canonical", *sorted(registry())]


@click.command()
@click.argument("file", type=click.File("rb"))
@click.option("--format", "fmt", type=click.Choice(_formats()), default="canonical",
              help="Source adapter (docs/adapters.md); canonical = our JSON events")
@click.option("--producer", default="file", help="Producer name recorded on each event")
@click.option("--cluster", default=None,
              help="Cluster, when the payload does not say (default: the one cluster the job "
                   "named by --project/--job has attempts in, else 'default')")
@click.option("--project", default="", help="For job logs: the job's project")
@click.option("--job", "job_id", default="", help="For job logs: the job id")
@click.option("--attempt", type=count(0, 10**6), default=None,
              help="For job logs: the attempt")
@click.option("--node", default="", help="Node the lines came from, when they do not say")
@click.option("--boot-time", "boot_time", default="",
              help="When the node booted (ISO 8601, epoch seconds, or a /proc/stat file): "
                   "places seconds-since-boot prefixes (raw dmesg, /dev/kmsg)")
@click.option("--tz", "zone", default="UTC", help="Time zone of local times in the lines "
                                                  "(dmesg -T, syslog, glog)")
@click.option("--year", type=count(1970, 2200), default=None,
              help="Year of lines that do not say it (default: inferred)")
@click.option("--kind", default="", help="Kubernetes: what a fragment without `kind` is "
                                         "(PyTorchJob, Job, Workload, ...)")
@click.pass_context
def ingest(ctx: click.Context, file: Any, fmt: str, producer: str, cluster: str, project: str,
           job_id: str, attempt: int | None, node: str, boot_time: str, zone: str,
           year: int | None, kind: str) -> None:
    """Ingest FILE (- for stdin): canonical JSON, or a source's own format with --format."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        raise click.BadParameter(f"{zone!r} is not an IANA time zone", param_hint="--tz") \
            from None
    context = {"cluster": cluster, "project": project, "job_id": job_id, "attempt": attempt,
               "node": node, "boot_time": _boot_time(boot_time), "tz": zone, "year": year,
               "kind": kind}
    _ingest_text(_settings(ctx), file.read(), producer=producer, origin=file.name,
                 adapter=fmt, context=context)


def _boot_time(value: str) -> datetime | None:
    """--boot-time: ISO 8601, epoch seconds, or a file holding /proc/stat (its btime)."""
    if not value:
        return None
    if value.replace(".", "", 1).isdigit():
        return datetime.fromtimestamp(float(value), tz=UTC)
    path = Path(value)
    if path.is_file():
        from ingest.timestamps import boot_time_from_proc_stat

        found = boot_time_from_proc_stat(path.read_text(errors="replace"))
        if found is None:
            raise click.BadParameter(f"{value}: no btime line", param_hint="--boot-time")
        return found
    return _parse_when(value)
