"""`jobtrail collect slurm`: the live Slurm collector as a long-running command
(docs/collect.md)."""

from __future__ import annotations

import signal
from pathlib import Path
from types import FrameType
from typing import Any

import click

from jobtrail.config import Settings


@click.group()
def collect() -> None:
    """Follow a live source and produce canonical events."""


@collect.command("slurm")
@click.option("--log", "log_path", type=click.Path(path_type=Path), default=None,
              help="slurmctld log to follow (e.g. /var/log/slurm/slurmctld.log); without it "
                   "node states come from sinfo --json")
@click.option("--cluster", default="", help="Cluster name (default: Slurm's ClusterName)")
@click.option("--project", default="", help="Project of every job (default: its account)")
@click.option("--cursor", "cursor_path", type=click.Path(path_type=Path), default=None,
              help="Cursor file (default: <home>/collect/slurm-cursor.json)")
@click.option("--interval", type=float, default=1.0, show_default=True,
              help="Seconds between polls")
@click.option("--to", "target", default="", help="http://host:port of `jobtrail serve` "
              "(token from JOBTRAIL_TOKEN); default: this home, or Kafka when JOBTRAIL_KAFKA "
              "is set")
@click.option("--max-steps", type=int, default=None, help="Stop after this many polls")
@click.pass_context
def slurm(ctx: click.Context, log_path: Path | None, cluster: str, project: str,
          cursor_path: Path | None, interval: float, target: str,
          max_steps: int | None) -> None:
    """Follow a live Slurm (squeue/sinfo --json, the slurmctld log) until SIGTERM/SIGINT."""
    import os

    from jobtrail.collect.sinks import HttpSink, RuntimeSink
    from jobtrail.collect.slurm import SlurmCollector

    settings: Settings = ctx.obj
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


COMMANDS = [collect]
