"""Cluster mode behind the CLI and the HTTP API: ingest and commands go to Kafka, reads to
the ClickHouse server; the Faust worker (`faust_app.py`) does the processing.

The producer lives on an event loop in a thread of its own, so callers stay synchronous
(the CLI, and the HTTP API's executor) and `submit` returns only after the broker
acknowledged every record (acks=all).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

from jobtrail.config import Settings
from jobtrail.runtime.kafka_io import KafkaPublisher
from jobtrail.runtime.sink import BatchResult, redact_command
from jobtrail.store import Store
from processors.incidents.model import Command, IncidentEvent
from processors.topology import Topology
from schemas.dead_letters import DeadLetter
from schemas.events import Event

T = TypeVar("T")

log = logging.getLogger("jobtrail.kafka")


class KafkaRuntime:
    mode = "cluster"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._store: Store | None = None
        self._publisher: KafkaPublisher | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="kafka-producer",
                                        daemon=True)
        self._thread.start()

    def publisher(self) -> KafkaPublisher:
        """Connected on first use and again after a failure: a server started while the
        broker is down comes up (not ready) and recovers when it returns."""
        if self._publisher is None:
            from jobtrail.runtime.kafka_io import ensure_topics

            self._run(ensure_topics(self.settings), timeout=60)
            self._publisher = self._run(self._start_publisher(), timeout=60)
        return self._publisher

    async def _start_publisher(self) -> KafkaPublisher:
        publisher = KafkaPublisher(self.settings)  # aiokafka wants its loop running
        try:
            await publisher.start()
        except BaseException:
            await publisher.stop()
            raise
        return publisher

    @property
    def store(self) -> Store:
        """Opened on first read: ingest and commands need only the broker."""
        if self._store is None:
            from jobtrail.runtime.build import open_store

            self._store = open_store(self.settings)
        return self._store

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float = 120) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def submit(self, records: Sequence[Event | DeadLetter]) -> int:
        self._run(self.publisher().publish(records))
        return len(records)

    def command(self, command: Command) -> list[IncidentEvent] | None:
        """Queued on jobtrail.incident-commands; the worker applies or dead-letters it."""
        cluster = None
        # the workers' store is a ClickHouse server in cluster mode; a chDB under this
        # process's home is not theirs, it would not know the incident
        if self.settings.clickhouse_dsn:
            try:
                cluster = self.store.incident_cluster(command.incident_id)
            except Exception as exc:  # keyed by incident id; a misrouted one is refused
                log.warning("could not look up the cluster of %s: %s", command.incident_id,
                            exc)
        self._run(self.publisher().publish_command(redact_command(command), cluster))
        return None

    def drain(self) -> BatchResult:
        return BatchResult()

    def topology(self) -> Topology:
        from jobtrail.runtime.build import load_topology
        from jobtrail.store.queries import wiring

        return wiring(self.store, load_topology(self.settings))

    def health(self) -> dict[str, object]:
        checks: dict[str, object] = {"mode": self.mode}
        try:
            self.store.ping()
            checks["store"] = "ok"
        except Exception as exc:
            checks["store"] = f"unavailable: {type(exc).__name__}: {exc}"
        try:
            self._run(self.publisher().ping(), timeout=10)
            checks["broker"] = "ok"
        except Exception as exc:
            checks["broker"] = f"unavailable: {type(exc).__name__}: {exc}"
        return checks

    def close(self) -> None:
        try:
            if self._publisher is not None:
                self._run(self._publisher.stop(), timeout=30)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
