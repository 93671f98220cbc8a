"""The ClickHouse cluster form of the migrations: parsed by ClickHouse's own parser (chDB's
`formatQuery`), shaped as Replicated tables behind Distributed ones sharded so that `FINAL`
stays exact, and with the same columns as the single-node tables (checked on the engine)."""

from __future__ import annotations

import re

import pytest

from jobtrail.store.cluster_ddl import SHARD_KEYS, UnsupportedStatement, cluster_statements
from jobtrail.store.core import Store, _statements, migrations

CLUSTER, DB = "prod", "jobtrail"


def _all() -> list[tuple[str, list[str]]]:
    return [(statement, cluster_statements(statement, cluster=CLUSTER, database=DB))
            for _, _, sql in migrations() for statement in _statements(sql)]


def test_every_cluster_statement_parses_and_is_idempotent(store: Store) -> None:
    for single, generated in _all():
        for statement in generated:
            formatted = store.client.query("SELECT formatQuery({q:String})",
                                           parameters={"q": statement}).result_rows[0][0]
            if not statement.startswith("INSERT"):
                assert f"ON CLUSTER {CLUSTER}" in formatted, statement
            assert not statement.startswith("CREATE") or "IF NOT EXISTS" in statement
            assert not re.search(r"ADD COLUMN (?!IF NOT EXISTS)", statement), statement
        assert generated == cluster_statements(single, cluster=CLUSTER, database=DB)


def test_tables_are_replicated_behind_distributed_ones_sharded_within_their_key() -> None:
    created: dict[str, str] = {}
    for single, generated in _all():
        if single.startswith("CREATE TABLE"):
            table = re.match(r"CREATE TABLE IF NOT EXISTS (\w+)", single)
            assert table is not None
            name = table.group(1)
            local, distributed = generated
            assert f"{DB}.{name}_local ON CLUSTER" in local
            assert "ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/" in local
            assert f"Distributed({CLUSTER}, {DB}, {name}_local, {SHARD_KEYS[name]})" in \
                distributed
            assert "non_replicated_deduplication_window" not in local
            order = re.search(r"ORDER BY \(?([^)\n]*)\)?", single)
            assert order is not None
            sorting = {c.strip() for c in order.group(1).split(",")}
            used = set(re.findall(r"\w+", SHARD_KEYS[name])) - {"cityHash64"}
            # rows that FINAL collapses share their sorting key, hence their shard
            assert used <= sorting, (name, used, sorting)
            created[name] = local
        elif single.startswith("ALTER TABLE"):
            assert [g.split(" ON CLUSTER")[0] for g in generated] == [
                f"ALTER TABLE {DB}.{single.split()[2]}_local",
                f"ALTER TABLE {DB}.{single.split()[2]}"]
    assert set(created) == set(SHARD_KEYS)


def test_local_tables_end_with_the_single_node_columns(store: Store) -> None:
    """Every statement for the `_local` tables, run in order on the engine (engine swapped
    back, no cluster, the backfill skipped), leaves each with exactly the columns of the
    table the single-node migrations made."""
    probe = f"{store.database}_c"
    store.client.command(f"CREATE DATABASE IF NOT EXISTS {probe}")
    try:
        for _, generated in _all():
            for statement in generated:
                if "Distributed(" in statement or statement.startswith("INSERT") or \
                        (re.match(rf"ALTER TABLE {DB}\.\w+ ON", statement) and \
                        "_local ON" not in statement):
                    continue
                local = statement.replace(f" ON CLUSTER {CLUSTER}", "").replace(
                    f"{DB}.", f"{probe}.")
                local = re.sub(r"ReplicatedReplacingMergeTree\('[^']*', '\{replica\}'(, )?",
                               "ReplacingMergeTree(", local).replace(
                    "ReplacingMergeTree()", "ReplacingMergeTree")
                local = local.replace("replicated_deduplication_window",
                                      "non_replicated_deduplication_window")
                store.client.command(local)
        for name in SHARD_KEYS:
            want = store.client.query(f"DESCRIBE TABLE {store.database}.{name}").result_rows
            got = store.client.query(f"DESCRIBE TABLE {probe}.{name}_local").result_rows
            assert got == want, name
    finally:
        store.client.command(f"DROP DATABASE IF EXISTS {probe}")


def test_a_statement_without_a_cluster_form_is_refused() -> None:
    with pytest.raises(UnsupportedStatement):
        cluster_statements("CREATE VIEW v AS SELECT 1", cluster=CLUSTER, database=DB)
    with pytest.raises(UnsupportedStatement, match="no sharding key"):
        cluster_statements("CREATE TABLE IF NOT EXISTS newtable (a String) ENGINE = "
                           "ReplacingMergeTree ORDER BY a", cluster=CLUSTER, database=DB)
    with pytest.raises(ValueError):
        cluster_statements("ALTER TABLE events ADD COLUMN IF NOT EXISTS x String",
                           cluster="prod; DROP", database=DB)
