"""ClickHouse: connection and migrations, the event write path and timeline reads (`core`), the
incident log and its projections (`incidents`), row codecs (`rows`), the retry policy (`retry`),
the cluster DDL (`cluster_ddl`) and the topology questions on-call asks (`queries`)."""

from jobtrail.store.core import Store, migrations

__all__ = ["Store", "migrations"]
