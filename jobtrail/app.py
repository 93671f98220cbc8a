"""Composition root: the one place the embedded-or-Kafka runtime is chosen from `Settings`.
The parts runtimes are built from (store, topology, sink) live in `jobtrail.runtime.build` and
are re-exported here for the CLI and the HTTP app."""

from __future__ import annotations

from jobtrail.config import Settings
from jobtrail.runtime import Runtime
from jobtrail.runtime.build import build_sink, load_topology, open_store
from jobtrail.runtime.embedded import EmbeddedRuntime
from processors.topology import Topology

__all__ = ["build_sink", "load_topology", "open_runtime", "open_store"]


def open_runtime(settings: Settings, *, topology: Topology | None = None) -> Runtime:
    """The one place the embedded-or-Kafka choice is made (CLI and HTTP both come here)."""
    if settings.cluster_mode:
        from jobtrail.runtime.kafka import KafkaRuntime

        return KafkaRuntime(settings)
    return EmbeddedRuntime(settings, topology=topology)
