"""`jobtrail collect kubernetes`: follow a cluster's API server (list + watch)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import click

from jobtrail.cli.common import _settings

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
