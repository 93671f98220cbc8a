"""The `grafana-clickhouse-datasource` query, as a foundation-SDK dataquery variant (the SDK
ships none for ClickHouse), and the pinned data source reference."""

from __future__ import annotations

import typing

from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog import runtime as cogruntime
from grafana_foundation_sdk.cog import variants as cogvariants
from grafana_foundation_sdk.models import common

PLUGIN = "grafana-clickhouse-datasource"
UID = "jobtrail-clickhouse"
"""Pinned: dashboards, provisioning and alert rules all refer to it."""

TIME_SERIES, TABLE, LOGS, TRACES = 0, 1, 2, 3
FORMATS = {TIME_SERIES: "time series", TABLE: "table", LOGS: "logs", TRACES: "traces"}


def datasource() -> common.DataSourceRef:
    return common.DataSourceRef(type_val=PLUGIN, uid=UID)


class Query(cogvariants.Dataquery):
    """`{"datasource", "editorType": "sql", "rawSql", "format", "refId"}` and nothing else."""

    def __init__(self, raw_sql: str = "", format_val: int = TABLE, ref_id: str = "A",
                 datasource_ref: common.DataSourceRef | None = None,
                 editor_type: str = "sql") -> None:
        self.raw_sql = raw_sql
        self.format_val = format_val
        self.ref_id = ref_id
        self.datasource = datasource_ref or datasource()
        self.editor_type = editor_type

    def to_json(self) -> dict[str, object]:
        return {"datasource": self.datasource, "editorType": self.editor_type,
                "format": self.format_val, "rawSql": self.raw_sql, "refId": self.ref_id}

    @classmethod
    def from_json(cls, data: dict[str, typing.Any]) -> Query:
        ref = data.get("datasource") or {}
        return cls(raw_sql=str(data.get("rawSql", "")), format_val=int(data.get("format", 1)),
                   ref_id=str(data.get("refId", "A")),
                   datasource_ref=common.DataSourceRef(type_val=ref.get("type"),
                                                       uid=ref.get("uid")),
                   editor_type=str(data.get("editorType", "sql")))


class QueryBuilder(cogbuilder.Builder[cogvariants.Dataquery]):
    def __init__(self, sql: str, fmt: int = TABLE, ref_id: str = "A") -> None:
        self._internal = Query(raw_sql=sql.strip(), format_val=fmt, ref_id=ref_id)

    def build(self) -> Query:
        return self._internal


def register() -> None:
    """Let `Dashboard.from_json` decode our targets (the SDK round-trip check)."""
    cogruntime.register_dataquery_variant(
        cogruntime.DataqueryConfig(identifier=PLUGIN, from_json_hook=Query.from_json))


def sql(text: str, fmt: int = TABLE, ref_id: str = "A") -> QueryBuilder:
    return QueryBuilder(text, fmt, ref_id)
