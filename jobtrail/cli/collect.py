"""`jobtrail collect kubernetes`: follow a cluster's API server (list + watch);
`jobtrail collect slurm`: follow a Slurm controller (docs/collect.md)."""

from __future__ import annotations

import signal
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import click

from jobtrail.cli.common import _settings, count, seconds

if TYPE_CHECKING:
    from ingest.canonical import Decoded


@click.group("collect")
def collect() -> None:
    """Live sources: follow a scheduler or an API and store what it says as events."""


@collect.command("kubernetes")
@click.option("--kubeconfig", default=None, help="kubeconfig file (default: in-cluster "
              "service account, else ~/.kube/config)")
@click.option("--server", default="", help="API server URL without credentials (tests, "
              "kubectl proxy)")
@click.option("--resources", default="events,jobs,pytorchjobs,mpijobs,workloads,jobsets,"
              "volcanojobs", show_default=True, help="What to watch (comma-separated).")
@click.option("--cluster", default="default", help="The cluster name put on every event.")
@click.option("--watch-timeout", default=300, show_default=True,
              help="Seconds one watch request lasts before it is renewed.")
@click.option("--until-idle", default=0.0, help="Exit after this many seconds without a new "
              "object (a backfill); 0: follow for ever.")
@click.pass_context
def kubernetes(ctx: click.Context, kubeconfig: str | None, server: str, resources: str,
               cluster: str, watch_timeout: int, until_idle: float) -> None:
    """List + watch Events, Jobs, Kubeflow/Kueue/JobSet/Volcano jobs into events."""
    from kubernetes import client, config

    from ingest.adapters import registry
    from jobtrail.app import open_runtime
    from jobtrail.collect.kubernetes import RESOURCES, Collector, Cursor

    settings = _settings(ctx)
    unknown = [r for r in resources.split(",") if r and r not in RESOURCES]
    if unknown:
        raise click.BadParameter(f"unknown {unknown}; one of {', '.join(RESOURCES)}",
                                 param_hint="--resources")
    if server:
        configuration = client.Configuration()
        configuration.host = server.rstrip("/")
        api_client = client.ApiClient(configuration)
    else:
        try:
            config.load_incluster_config()
        except config.ConfigException:
            config.load_kube_config(config_file=kubeconfig)
        api_client = client.ApiClient()
    runtime = open_runtime(settings)

    def submit(records: Sequence[Decoded]) -> None:
        runtime.submit(records)
        runtime.drain()

    collector = Collector(api_client, registry(settings.adapter_config())["kubernetes"],
                          submit, Cursor(settings.home / "collect" / "kubernetes.json"),
                          cluster=cluster, watch_timeout_s=watch_timeout)
    try:
        collector.run([RESOURCES[r] for r in resources.split(",") if r],
                      until_idle_s=until_idle)
    except KeyboardInterrupt:
        pass
    finally:
        runtime.close()
    click.echo(f"stopped; cursor {collector.cursor.versions}")


@collect.command("slurm")
@click.option("--log", "log_path", type=click.Path(path_type=Path), default=None,
              help="slurmctld log to follow (e.g. /var/log/slurm/slurmctld.log); without it "
                   "node states come from sinfo --json")
@click.option("--cluster", default="", help="Cluster name (default: Slurm's ClusterName)")
@click.option("--project", default="", help="Project of every job (default: its account)")
@click.option("--cursor", "cursor_path", type=click.Path(path_type=Path), default=None,
              help="Cursor file (default: <home>/collect/slurm-cursor.json)")
@click.option("--interval", type=seconds(0, 3600), default=1.0, show_default=True,
              help="Seconds between polls")
@click.option("--to", "target", default="", help="http://host:port of `jobtrail serve` "
              "(token from JOBTRAIL_TOKEN); default: this home, or Kafka when JOBTRAIL_KAFKA "
              "is set")
@click.option("--max-steps", type=count(1), default=None, help="Stop after this many polls")
@click.pass_context
def slurm(ctx: click.Context, log_path: Path | None, cluster: str, project: str,
          cursor_path: Path | None, interval: float, target: str,
          max_steps: int | None) -> None:
    """Follow a live Slurm (squeue/sinfo --json, the slurmctld log) until SIGTERM/SIGINT."""
    import os

    from jobtrail.collect.sinks import HttpSink, RuntimeSink
    from jobtrail.collect.slurm import SlurmCollector

    settings = _settings(ctx)
    stop: list[int] = []

    def _stop(signum: int, _frame: FrameType | None) -> None:
        stop.append(signum)

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    runtime: Any = None
    if target:
        sink: Any = HttpSink(target, os.environ.get("JOBTRAIL_TOKEN", ""))
    else:
        from jobtrail.app import open_runtime

        runtime = open_runtime(settings)
        sink = RuntimeSink(runtime)
    collector = SlurmCollector(
        sink, cursor_path or settings.home / "collect" / "slurm-cursor.json",
        cluster=cluster, project=project, log_path=log_path)
    click.echo(f"collecting from Slurm every {interval:g} s"
               + (f", following {log_path}" if log_path else ", nodes from sinfo"), err=True)
    try:
        collector.run(interval_s=interval, until=lambda: bool(stop), max_steps=max_steps)
    finally:
        if runtime is not None:
            runtime.close()
    click.echo(f"sent {collector.sent_total} records", err=True)

