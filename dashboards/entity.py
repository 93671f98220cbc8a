"""One entity across jobs: what happened on a node, GPU, NIC, switch, port or filesystem
(`jobtrail entity NAME`), which job attempts ran on it or were reached through it, and the
incidents it is part of. The links end here: incident -> job -> entity.

Bound to the chosen projects (All: every project the data source may read): job rows and
job events only of those projects, cluster-level events (no project) as shared context,
incidents that touched those projects or no job at all. Row policies (`jobtrail access
grant`) narrow what "every project" is for a team's data source.
"""

from __future__ import annotations

from typing import Any

from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import logs, table, timeseries

from dashboards.clickhouse import LOGS, TABLE, TIME_SERIES, datasource, sql
from dashboards.common import (
    ENTITY_UID,
    FLEET_UID,
    link,
    panel,
    to_incident,
    to_job,
    variable,
)

PROJECTS = "${project:singlequote}"
_E = "${entity:sqlstring}"
ON = (f"(entity = {_E} OR node = {_E} OR startsWith(entity, concat({_E}, '/')) "
      f"OR (position(attributes, {_E}) > 0 AND (JSONExtractString(attributes, 'switch') = {_E} "
      f"OR JSONExtractString(attributes, 'filesystem') = {_E})))")
"""An event on the entity, as `Store.entity_timeline` (the CLI's `jobtrail entity`) has it:
on it, on its node, on a part of it (`node-041/gpu3` is part of `node-041`), or naming it
as the switch or filesystem it went through."""

EVENTS = f"""
SELECT time AS timestamp, concat(type, '  ', message) AS body, severity AS level,
       source, type, project, job_id, attempt, entity, node, id
FROM events
WHERE {ON} AND (project = '' OR project IN ({PROJECTS})) AND $__timeFilter_ms(time)
ORDER BY time DESC, id
LIMIT 1 BY id
LIMIT 5000
"""
"""Not `FINAL`: `LIMIT 1 BY id` is exact for the few rows that match (Store.entity_timeline)."""

BY_TYPE = f"""
SELECT $__timeInterval_ms(time) AS time, type, uniqExact(id) AS events
FROM events
WHERE {ON} AND (project = '' OR project IN ({PROJECTS})) AND $__timeFilter_ms(time)
GROUP BY time, type ORDER BY time
"""

JOBS = f"""
SELECT a.project AS project, a.job_id AS job_id, a.attempt AS attempt, a.state AS state,
       a.started_at AS started_at, a.ended_at AS ended_at,
       if(t.rows = 0, 'ran on it', t.relations) AS how, t.rows AS timeline_rows
FROM (SELECT project, job_id, attempt, state, started_at, ended_at, nodes
      FROM job_attempts FINAL WHERE project IN ({PROJECTS})) AS a
LEFT JOIN (SELECT project, job_id, attempt, count() AS rows,
                  arrayStringConcat(groupUniqArray(relation), ', ') AS relations
           FROM job_timeline FINAL
           WHERE project IN ({PROJECTS}) AND relation != 'self'
             AND (entity = {_E} OR startsWith(entity, concat({_E}, '/'))
                  OR position(link_path, {_E}) > 0)
             AND $__timeFilter_ms(time)
           GROUP BY project, job_id, attempt) AS t
       ON t.project = a.project AND t.job_id = a.job_id AND t.attempt = a.attempt
WHERE t.rows > 0 OR (has(a.nodes, splitByChar('/', {_E})[1])
                     AND a.started_at <= $__toTime_ms
                     AND (a.ended_at IS NULL OR a.ended_at >= $__fromTime_ms))
ORDER BY started_at, project, job_id, attempt
"""
"""The attempts of the chosen projects that ran on it (or on its node) in the range, or whose
timeline holds an event that reached them through it."""

INCIDENTS = f"""
SELECT incident_id AS incident, severity, status, class, entity, cause_entity, owner,
       opened_at, round(lost_gpu_hours, 2) AS lost_gpu_hours, impacted_jobs
FROM incidents FINAL
WHERE (hasAny(projects, [{PROJECTS}]) OR empty(projects)) AND NOT has(flags, 'withdrawn')
  AND (entity = {_E} OR cause_entity = {_E} OR startsWith(entity, concat({_E}, '/'))
       OR startsWith(cause_entity, concat({_E}, '/'))
       OR incident_id IN (SELECT incident_id FROM incident_evidence FINAL
                          WHERE role != 'moved' AND (entity = {_E}
                                OR startsWith(entity, concat({_E}, '/')))))
  AND $__timeFilter_ms(opened_at)
ORDER BY opened_at DESC LIMIT 200
"""
"""Incidents on it, caused by it or holding evidence on it, of the chosen projects (or of no
project: a switch failing under idle nodes)."""

ANNOTATIONS = f"""
SELECT opened_at AS time, coalesce(resolved_at, last_signal_at) AS timeEnd,
       concat(severity, ' ', class, ' on ', entity, ' -> ', owner) AS text, class AS tags
FROM incidents FINAL
WHERE (hasAny(projects, [{PROJECTS}]) OR empty(projects)) AND NOT has(flags, 'withdrawn')
  AND (entity = {_E} OR cause_entity = {_E} OR startsWith(entity, concat({_E}, '/')))
  AND $__timeFilter_ms(opened_at)
"""


def build() -> Any:
    annotation = (dash.AnnotationQuery().name("Incidents").datasource(datasource())
                  .enable(True).icon_color("red").target(sql(ANNOTATIONS, TABLE)))
    return (
        dash.Dashboard("jobtrail: entity").uid(ENTITY_UID).tags(["jobtrail"])
        .description("What happened on one node, GPU, NIC, switch, port or filesystem, "
                     "across the jobs of the chosen projects.")
        .time("now-24h", "now").refresh("1m").readonly()
        .with_variable(variable("project", "Project", "SELECT DISTINCT project FROM "
                                "job_attempts FINAL ORDER BY project", include_all=True,
                                multi=True))
        .with_variable(dash.TextBoxVariable("entity").label("Entity")
                       .default_value("node-001"))
        .annotation(annotation)
        .link(link("Fleet", f"/d/{FLEET_UID}"))
        .with_panel(panel(table.Panel(), "Incidents on it", INCIDENTS, TABLE, h=7)
                    .data_links([to_incident()]))
        .with_panel(panel(table.Panel(), "Job attempts on it or reached through it", JOBS,
                          TABLE, h=7)
                    .data_links([to_job(attempt="${__data.fields.attempt}")]))
        .with_panel(panel(timeseries.Panel(), "Events by type", BY_TYPE, TIME_SERIES, h=6))
        .with_panel(panel(logs.Panel(), "What happened on it", EVENTS, LOGS, h=12,
                          description="The entity's own events, its parts' and those "
                                      "naming it as their switch or filesystem "
                                      "(`jobtrail entity NAME`)."))
    )
