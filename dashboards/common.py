"""What the dashboards share: uids, variables, the job filter, links, the panel helper."""

from __future__ import annotations

from typing import Any

from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.models import dashboard as model

from dashboards.clickhouse import datasource, sql

JOB_UID = "jobtrail-job"
INCIDENT_UID = "jobtrail-incident"
FLEET_UID = "jobtrail-fleet"
ENTITY_UID = "jobtrail-entity"
ONCALL_UID = "jobtrail-oncall"
FOLDER_UID = "jobtrail"
JOBTRAIL_URL = "jobtrail_url"
"""A constant variable: where Grafana's users reach jobtrail's HTTP API and pages (set by
`jobtrail dashboards publish --jobtrail-url`)."""
DEFAULT_JOBTRAIL_URL = "http://localhost:8080"

# the job's own rows, bound to the selected project and job and to the attempt unless All
# is chosen (every job-dashboard query has it; `$__conditionalAll` is the plugin's)
JOB_FILTER = ("project = ${project:sqlstring} AND job_id = ${job:sqlstring} "
              "AND $__conditionalAll(toString(attempt) IN (${attempt:singlequote}), $attempt)")

VIEW_END = "least(now64(3), $__toTime_ms)"
"""Where "now" is on a board: the end of its time range, never later than now (an age on a
past range is the age it had then)."""

ALL_OPTION = model.VariableOption(selected=True, text="All", value="$__all")


def variable(name: str, label: str, query: str, *, include_all: bool = False,
             multi: bool = False) -> Any:
    """A query variable; with All (no custom all value: All is every option, so each format
    gives valid SQL) selected by default."""
    v = (dash.QueryVariable(name).label(label).query(query).datasource(datasource())
         .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED))
    if multi:
        v = v.multi(True)
    if include_all:
        v = v.include_all(True).current(ALL_OPTION if not multi else model.VariableOption(
            selected=True, text=["All"], value=["$__all"]))
    return v


def jobtrail_url_variable() -> Any:
    return (dash.ConstantVariable(JOBTRAIL_URL).label("jobtrail URL")
            .value(DEFAULT_JOBTRAIL_URL))


def with_jobtrail_url(board: dict[str, Any], url: str) -> dict[str, Any]:
    """The built board with its jobtrail URL constant set to `url`."""
    out = {**board, "templating": {**board.get("templating", {}), "list": []}}
    for v in board.get("templating", {}).get("list", []):
        if v.get("name") == JOBTRAIL_URL:
            v = {**v, "query": url, "current": {"text": url, "value": url}}
        out["templating"]["list"].append(v)
    return out


def project_variable() -> Any:
    return variable("project", "Project",
                    "SELECT DISTINCT project FROM job_attempts FINAL ORDER BY project")


def link(title: str, url: str) -> Any:
    return dash.DashboardLink(title).type(model.DashboardLinkType.LINK).url(url) \
        .keep_time(True)


def to_job(project: str = "${__data.fields.project}", job: str = "${__data.fields.job_id}",
           attempt: str = "") -> Any:
    """A data link to the job dashboard (the row's project and job, optionally attempt)."""
    url = f"/d/{JOB_UID}?var-project={project}&var-job={job}"
    if attempt:
        url += f"&var-attempt={attempt}"
    return link("Job timeline", url + "&${__url_time_range}")


def to_incident(field: str = "incident") -> Any:
    return link("Open incident", f"/d/{INCIDENT_UID}?var-incident=${{__data.fields.{field}}}"
                "&${__url_time_range}")


def to_entity(field: str = "entity", project: str = "") -> Any:
    """A data link to the entity dashboard for the row's `field` (and `project`; else All)."""
    url = f"/d/{ENTITY_UID}?var-entity=${{__data.fields.{field}}}"
    if project:
        url += f"&var-project={project}"
    return link("What happened on it", url + "&${__url_time_range}")


def panel(builder: Any, title: str, query: str, fmt: int, *, w: int = 24, h: int = 8,
          description: str = "", extra: list[tuple[str, int]] | None = None) -> Any:
    """A panel with one ClickHouse target (refId A) and optional more (B, C...)."""
    p = builder.title(title).datasource(datasource()).span(w).height(h).with_target(
        sql(query, fmt, "A"))
    for i, (text, extra_fmt) in enumerate(extra or [], start=1):
        p = p.with_target(sql(text, extra_fmt, chr(ord("A") + i)))
    if description:
        p = p.description(description)
    return p


def partition_by(field: str) -> model.DataTransformerConfig:
    """A state timeline from a table: one band per value of `field`."""
    return model.DataTransformerConfig(id_val="partitionByValues",
                                       options={"fields": [field], "keepFields": False})


def build(board: cogbuilder.Builder[model.Dashboard]) -> dict[str, Any]:
    import json

    from grafana_foundation_sdk.cog.encoder import JSONEncoder

    out: dict[str, Any] = json.loads(json.dumps(board.build(), cls=JSONEncoder))
    for number, item in enumerate(out.get("panels", []), start=1):
        item.setdefault("id", number)  # stable, unique: the order panels are added in
    return out
