"""The `jobtrail schema` commands: the canonical event model as JSON Schema (`export`), the
ClickHouse DDL the migrations apply (`ddl`) and the registered event types (`types`); registered
on the root group by `jobtrail.cli.main`."""

from __future__ import annotations

import json
from pathlib import Path

import click


@click.group()
def schema() -> None:
    """The canonical event model."""


@schema.command("export")
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="Directory for one JSON Schema file per type plus the envelope")
def schema_export(out: Path | None) -> None:
    """Export JSON Schema so producers in any language can validate."""
    from schemas.jsonschema import export

    documents = export()
    if out is None:
        click.echo(json.dumps(documents["jobtrail-event.schema.json"], indent=2))
        return
    out.mkdir(parents=True, exist_ok=True)
    for name, document in documents.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
    click.echo(f"wrote {len(documents)} schema files to {out}")


@schema.command("ddl")
@click.option("--cluster", default="", help="A ClickHouse cluster: Replicated + Distributed")
@click.option("--database", default="jobtrail", show_default=True)
def schema_ddl(cluster: str, database: str) -> None:
    """Print the ClickHouse DDL the migrations apply (for review, or to apply by hand)."""
    from jobtrail.store.cluster_ddl import cluster_statements, migrations_table
    from jobtrail.store.core import _statements, migrations

    if cluster:
        click.echo(migrations_table(cluster, database) + ";\n")
    for version, name, sql in migrations():
        click.echo(f"-- {version:04d}_{name}")
        for statement in _statements(sql):
            for one in (cluster_statements(statement, cluster=cluster, database=database)
                        if cluster else [statement]):
                click.echo(one + ";\n")


@schema.command("types")
def schema_types() -> None:
    """List the registered event types."""
    from schemas.registry import REGISTRY

    for name, entry in sorted(REGISTRY.items()):
        click.echo(f"{name:<22} {entry.source.value:<10} {entry.doc}")
