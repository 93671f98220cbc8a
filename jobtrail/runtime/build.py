"""The parts every runtime is built from: the store (after the home lock), the topology file
and the shared sink with a fresh pipeline. Runtimes import these; `jobtrail.app` chooses the
runtime."""

from __future__ import annotations

import gc
from datetime import timedelta

from jobtrail.config import Settings
from jobtrail.reports import retention
from jobtrail.runtime.sink import Sink
from jobtrail.store import Store
from processors.incidents.eviction import Eviction
from processors.pipeline import Pipeline
from processors.topology import Topology


def open_store(settings: Settings) -> Store:
    """The store; the embedded engine under the home is taken only after the home lock
    (one process per home: a second one is told who holds it)."""
    settings.home.mkdir(parents=True, exist_ok=True)
    if not settings.clickhouse_dsn:
        from jobtrail.runtime.home import HomeLock

        HomeLock(settings.home).acquire()
    store = Store.connect(settings.dsn, settings.database,
                          timeout_s=settings.clickhouse_timeout_s,
                          cluster=settings.clickhouse_cluster)
    store.migrate()
    retention.apply(store, settings.retention)
    return store


def load_topology(settings: Settings) -> Topology:
    spec = settings.topology_spec()
    return Topology() if spec is None else Topology.from_file(spec)


def eviction(settings: Settings) -> Eviction:
    """When incidents leave a worker's memory (docs/scaling.md)."""
    def after(seconds: float | None) -> timedelta | None:
        return None if seconds is None else timedelta(seconds=seconds)
    return Eviction(after(settings.evict_after_s), after(settings.evict_quiet_s))


def build_sink(settings: Settings, store: Store, topology: Topology | None = None, *,
               restore: bool = True) -> Sink:
    """The shared write path with a fresh pipeline; `restore` rebuilds its state from the
    store (runtimes with a snapshot pass False and load theirs)."""
    tune_gc(settings)
    pipeline = Pipeline(timedelta(seconds=settings.attribution_slack_s),
                        topology or load_topology(settings),
                        timedelta(seconds=settings.lateness_s),
                        settings.rules(), eviction(settings))
    sink = Sink(store, pipeline)
    if restore:
        sink.restore()
    return sink


def tune_gc(settings: Settings) -> None:
    """Collect the young generation every `gc_young` allocations, not every 700: each pass
    that reaches the oldest generation walks the whole pipeline state (a hundred ms at 50k
    events held), and the default made one every few thousand events. Only cycles are left
    to the collector; everything else is freed by reference counting as before."""
    if settings.gc_young:
        gc.set_threshold(settings.gc_young, *gc.get_threshold()[1:])
