"""Shared fixtures: one chDB engine per test process, one database per test.

chDB allows one engine path per process, so tests isolate by database name instead. The
Kafka broker is real (jobtrail.dev.kafka); under CI=true a broker that cannot start fails
the run instead of skipping, so "broker-backed tests ran" is never silently false.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from jobtrail.store import Store

OBSERVED = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(scope="session")
def chdb_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("chdb")


def _fresh_store(dsn: str) -> Iterator[Store]:
    database = f"t_{uuid.uuid4().hex[:12]}"
    s = Store.connect(dsn, database)
    s.migrate()
    yield s
    s.client.command(f"DROP DATABASE IF EXISTS {database}")
    s.close()


@pytest.fixture
def store(chdb_path: Path) -> Iterator[Store]:
    yield from _fresh_store(f"chdb://{chdb_path}")


@pytest.fixture(scope="session")
def clickhouse_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A ClickHouse server on loopback (chDB behind the HTTP interface,
    jobtrail.dev.clickhouse), for what several processes share and for the HTTP client path."""
    from jobtrail.dev import clickhouse

    server = clickhouse.start(tmp_path_factory.mktemp("clickhouse"))
    yield server.dsn
    clickhouse.stop(server)


@pytest.fixture(params=["chdb", "http"])
def backend_store(request: pytest.FixtureRequest, chdb_path: Path) -> Iterator[Store]:
    """The store contract on both backends: the embedded engine through clickhouse-connect's
    chDB client, and a server through its HTTP client."""
    dsn = f"chdb://{chdb_path}" if request.param == "chdb" else \
        request.getfixturevalue("clickhouse_server")
    yield from _fresh_store(dsn)


@pytest.fixture(scope="session")
def kafka_broker_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The session's broker as a `jobtrail.dev.kafka.Broker`, for tests that take it down and
    bring it back (`kafka.restart` keeps its port and log dirs)."""
    from jobtrail.dev import kafka

    try:
        broker = kafka.start(tmp_path_factory.mktemp("kafka"))
    except kafka.BrokerError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"the Kafka broker must run in CI: {exc}")
        pytest.skip(f"no Kafka broker: {exc}")
    holder = [broker]
    yield holder
    kafka.stop(holder[0])


@pytest.fixture(scope="session")
def kafka_broker(kafka_broker_process: list[Any]) -> str:
    return str(kafka_broker_process[0].bootstrap)
