"""Composition root: build the store, the shared sink and a runtime from `Settings`."""

from __future__ import annotations

from datetime import timedelta

from jobtrail.config import Settings
from jobtrail.runtime.embedded import EmbeddedLog, EmbeddedRunner
from jobtrail.runtime.sink import Sink
from jobtrail.store import Store
from processors.incidents.rules import load_rules
from processors.pipeline import Pipeline
from processors.topology import Topology
from schemas import topology as topology_file


def open_store(settings: Settings) -> Store:
    settings.home.mkdir(parents=True, exist_ok=True)
    store = Store.connect(settings.dsn, settings.database)
    store.migrate()
    return store


def load_topology(settings: Settings) -> Topology:
    if settings.topology_file is None:
        return Topology()
    return Topology.from_file(topology_file.load(settings.topology_file))


def build_sink(settings: Settings, store: Store, topology: Topology | None = None) -> Sink:
    pipeline = Pipeline(timedelta(seconds=settings.attribution_slack_s),
                        topology or load_topology(settings),
                        timedelta(seconds=settings.lateness_s),
                        load_rules(settings.rules_file))
    sink = Sink(store, pipeline)
    sink.restore()
    return sink


def embedded_runner(settings: Settings, store: Store | None = None,
                    topology: Topology | None = None) -> EmbeddedRunner:
    store = store or open_store(settings)
    return EmbeddedRunner(build_sink(settings, store, topology),
                          EmbeddedLog(settings.home / "log"), batch_size=settings.batch_size)
