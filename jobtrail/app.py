"""Composition root: build the store, the shared sink and a runtime from `Settings`."""

from __future__ import annotations

from datetime import timedelta

from jobtrail.config import Settings
from jobtrail.store import Store
from processors.pipeline import Pipeline
from processors.runtime.embedded import EmbeddedLog, EmbeddedRunner
from processors.runtime.sink import Sink


def open_store(settings: Settings) -> Store:
    settings.home.mkdir(parents=True, exist_ok=True)
    store = Store.connect(settings.dsn, settings.database)
    store.migrate()
    return store


def build_sink(settings: Settings, store: Store) -> Sink:
    sink = Sink(store, Pipeline(timedelta(seconds=settings.attribution_slack_s)))
    sink.restore()
    return sink


def embedded_runner(settings: Settings, store: Store | None = None) -> EmbeddedRunner:
    store = store or open_store(settings)
    return EmbeddedRunner(build_sink(settings, store), EmbeddedLog(settings.home / "log"),
                          batch_size=settings.batch_size)
