"""`jobtrail dev`: the real engines on loopback for development, tests and benchmarks."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import click


@click.group()
def dev() -> None:
    """Development helpers."""


@dev.group()
def kafka() -> None:
    """A real single-node KRaft broker on 127.0.0.1 (jars from Maven Central)."""


_BROKER_DIR = Path("var/kafka")


@kafka.command("fetch")
def kafka_fetch() -> None:
    """Resolve the broker jars with Maven into the cache."""
    from jobtrail.dev import kafka as broker

    click.echo(str(broker.fetch()))


def _running(service: ModuleType, directory: Path) -> Any:
    """The dev service started from `directory`: the one running there, or a new one."""
    running = service.load(directory)
    return running if running and service.alive(running) else service.start(directory)


def _stop(service: ModuleType, directory: Path) -> None:
    running = service.load(directory)
    if running:
        service.stop(running)
    click.echo("stopped")


@kafka.command("start")
@click.option("--dir", "directory", type=click.Path(path_type=Path), default=_BROKER_DIR)
def kafka_start(directory: Path) -> None:
    """Start the broker; prints the bootstrap address (export it as JOBTRAIL_KAFKA)."""
    from jobtrail.dev import kafka as broker

    click.echo(_running(broker, directory).bootstrap)


@kafka.command("stop")
@click.option("--dir", "directory", type=click.Path(path_type=Path), default=_BROKER_DIR)
def kafka_stop(directory: Path) -> None:
    """Stop the broker started from DIR (by pid)."""
    from jobtrail.dev import kafka as broker

    _stop(broker, directory)


@kafka.command("status")
@click.option("--dir", "directory", type=click.Path(path_type=Path), default=_BROKER_DIR)
def kafka_status(directory: Path) -> None:
    from jobtrail.dev import kafka as broker

    running = broker.load(directory)
    if running and broker.alive(running):
        click.echo(f"running pid {running.pid} on {running.bootstrap}")
    else:
        click.echo("not running")
        raise SystemExit(1)


@dev.group()
def clickhouse() -> None:
    """A ClickHouse server on 127.0.0.1 for development: chDB behind ClickHouse's HTTP
    interface, so several workers can share one store (production: a ClickHouse server)."""


_CLICKHOUSE_DIR = Path("var/clickhouse")


@clickhouse.command("start")
@click.option("--dir", "directory", type=click.Path(path_type=Path), default=_CLICKHOUSE_DIR)
def clickhouse_start(directory: Path) -> None:
    """Start it; prints its URL (export it as JOBTRAIL_CLICKHOUSE)."""
    from jobtrail.dev import clickhouse as server

    click.echo(_running(server, directory).dsn)


@clickhouse.command("stop")
@click.option("--dir", "directory", type=click.Path(path_type=Path), default=_CLICKHOUSE_DIR)
def clickhouse_stop(directory: Path) -> None:
    """Stop the server started from DIR (by pid); its data stays under DIR."""
    from jobtrail.dev import clickhouse as server

    _stop(server, directory)
