"""The DDL for a ClickHouse cluster, generated from the single-node migrations.

A cluster (`JOBTRAIL_CLICKHOUSE_CLUSTER`, the name in the servers' `remote_servers`) gets,
for every table of `schemas/clickhouse/`:

- `<table>_local ON CLUSTER`: the same columns, indexes, order, partitioning and TTL on a
  `ReplicatedReplacingMergeTree` (Keeper path `/clickhouse/tables/{shard}/<db>/<table>`,
  replica `{replica}` from each server's macros);
- `<table> ON CLUSTER`: a `Distributed` table over them, sharded so that every row a
  `FINAL` must collapse lives on one shard: events and ids by id, a job's timeline and
  attempts by (project, job), an incident's log and projections by incident.

So every query the product runs stays as it is (same table names, `FINAL` is exact per
shard), and an `ALTER` is applied to both. Inserts go through the Distributed tables with
`distributed_foreground_insert = 1`, so "acknowledged" still means written on the shards.
`schema_migrations` is one replicated table on every node (not sharded), so whichever node a
process connects to knows what was applied. Every statement is idempotent (`IF NOT EXISTS`,
`ADD COLUMN IF NOT EXISTS`) and `ON CLUSTER`, so re-running the migrations on a cluster is a
no-op.

The single-node DDL (chDB and one server) is the migrations files unchanged.
"""

from __future__ import annotations

import re

SHARD_KEYS = {
    "events": "cityHash64(id)",
    "event_ids": "cityHash64(id)",
    "dead_letters": "cityHash64(id)",
    "job_timeline": "cityHash64(project, job_id)",
    "job_attempts": "cityHash64(project, job_id)",
    "incident_log": "cityHash64(incident_id)",
    "incidents": "cityHash64(incident_id)",
    "incident_retention": "cityHash64(incident_id)",
    "incident_evidence": "cityHash64(incident_id)",
    "incident_jobs": "cityHash64(incident_id)",
    "actions": "cityHash64(incident_id)",
    "subscriptions": "cityHash64(id)",
    "silences": "cityHash64(id)",
    "notifications": "cityHash64(id)",
    "deliveries": "cityHash64(notification_id)",
    "worker_state": "cityHash64(app_id, shard)",
    "login_states": "cityHash64(state_hash)",
    "session_revocations": "cityHash64(sid_hash)",
}
"""Each table's sharding key: a function of columns of its sorting key, so the rows one
`FINAL` collapses are always on one shard."""

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_CREATE = re.compile(
    r"^CREATE TABLE IF NOT EXISTS (?P<table>\w+)\s*\((?P<body>.*)\)\s*ENGINE\s*=\s*"
    r"ReplacingMergeTree(?:\((?P<args>[^)]*)\))?(?P<rest>.*)$", re.DOTALL)
_ALTER = re.compile(r"^ALTER TABLE (?P<table>\w+)\s+(?P<op>.*)$", re.DOTALL)
_INSERT = re.compile(r"^INSERT INTO \w+", re.DOTALL)


class UnsupportedStatement(ValueError):
    """A migration statement the cluster form does not know how to translate."""


def _check(name: str, what: str) -> str:
    if not _NAME.match(name):
        raise ValueError(f"{what} {name!r} is not a plain identifier")
    return name


def migrations_table(cluster: str, database: str) -> str:
    """The applied-migrations table, replicated to every node (one Keeper path, no shard)."""
    return (f"CREATE TABLE IF NOT EXISTS {database}.schema_migrations ON CLUSTER {cluster} "
            "(version UInt32, name String, applied_at DateTime64(3, 'UTC')) "
            f"ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/all/{database}/"
            "schema_migrations', '{replica}') ORDER BY version")


def cluster_statements(statement: str, *, cluster: str, database: str) -> list[str]:
    """One single-node statement as the statements a cluster runs instead."""
    _check(cluster, "cluster")
    _check(database, "database")
    text = statement.strip()
    create = _CREATE.match(text)
    if create is not None:
        table = create.group("table")
        key = SHARD_KEYS.get(table)
        if key is None:
            raise UnsupportedStatement(f"no sharding key for table {table!r} (SHARD_KEYS)")
        args = (create.group("args") or "").strip()
        engine = (f"ReplicatedReplacingMergeTree('/clickhouse/tables/{{shard}}/{database}/"
                  f"{table}', '{{replica}}'{', ' + args if args else ''})")
        rest = create.group("rest").replace("non_replicated_deduplication_window",
                                            "replicated_deduplication_window")
        return [
            f"CREATE TABLE IF NOT EXISTS {database}.{table}_local ON CLUSTER {cluster}\n"
            f"({create.group('body')})\nENGINE = {engine}{rest}",
            f"CREATE TABLE IF NOT EXISTS {database}.{table} ON CLUSTER {cluster} "
            f"AS {database}.{table}_local\n"
            f"ENGINE = Distributed({cluster}, {database}, {table}_local, {key})",
        ]
    alter = _ALTER.match(text)
    if alter is not None:
        table, op = alter.group("table"), alter.group("op")
        return [f"ALTER TABLE {database}.{table}_local ON CLUSTER {cluster} {op}",
                f"ALTER TABLE {database}.{table} ON CLUSTER {cluster} {op}"]
    if _INSERT.match(text):
        return [text]  # through the Distributed tables: rows go to their shards
    raise UnsupportedStatement(f"no cluster form for: {text[:80]}")


def cluster_migrations(migrations: list[tuple[int, str, list[str]]], *, cluster: str,
                       database: str) -> list[tuple[int, str, list[str]]]:
    """(version, name, statements) of every migration, in the cluster form."""
    return [(version, name, [out for statement in statements
                             for out in cluster_statements(statement, cluster=cluster,
                                                           database=database)])
            for version, name, statements in migrations]
