"""ClickHouse: connection, migrations and the event write path (`core`), a job's attempts and
timeline reads (`job_reads`), the incident log and its projections (`incidents`), row codecs
(`rows`), the retry policy (`retry`), the cluster DDL (`cluster_ddl`) and the topology questions
on-call asks (`queries`)."""

from jobtrail.store.core import Store, migrations

__all__ = ["Store", "migrations"]
