"""The on-call view of one job: a summary row and the incident that explains the failure at
the top (above the fold), then cross-system bands, the event stream, attempts as a trace,
progress and checkpoints, what the attempt ran on, incidents, and the queue wait."""

from __future__ import annotations

from typing import Any

from grafana_foundation_sdk.builders import common, logs, stat, statetimeline, table, timeseries
from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.models import dashboard as model
from grafana_foundation_sdk.models.common import (
    BigValueTextMode,
    LegendDisplayMode,
    LegendPlacement,
)

from dashboards.clickhouse import LOGS, TABLE, TIME_SERIES, TRACES, datasource, sql
from dashboards.common import (
    INCIDENT_UID,
    JOB_FILTER,
    JOB_UID,
    VIEW_END,
    link,
    panel,
    partition_by,
    project_variable,
    to_entity,
    to_incident,
    variable,
)

SUMMARY = f"""
WITH (SELECT coalesce(argMax(tuple(ended_at), attempt).1, {VIEW_END}) FROM job_attempts FINAL
      WHERE {JOB_FILTER}) AS attempt_end
SELECT
  (SELECT argMax(state, attempt) FROM job_attempts FINAL WHERE {JOB_FILTER}) AS state,
  (SELECT max(attempt) FROM job_attempts FINAL WHERE {JOB_FILTER}) AS attempt,
  (SELECT argMax(JSONExtractInt(attributes, 'step'), time) FROM job_timeline FINAL
   WHERE {JOB_FILTER} AND type = 'job.step') AS last_step,
  (SELECT if(count() = 0, NULL, round(dateDiff('millisecond', max(time), attempt_end) / 60000,
                                      1))
   FROM job_timeline FINAL
   WHERE project = ${{project:sqlstring}} AND job_id = ${{job:sqlstring}}
     AND attempt <= (SELECT max(attempt) FROM job_attempts FINAL WHERE {JOB_FILTER})
     AND type = 'checkpoint.saved' AND time <= attempt_end) AS checkpoint_age_min,
  (SELECT if(count() = 0, 'none', argMax(concat(severity, ' ', class, ' on ', entity, ' (',
                                                incident_id, ')'), opened_at))
   FROM incidents FINAL
   WHERE status NOT IN ('resolved', 'closed') AND incident_id IN (
     SELECT incident_id FROM incident_jobs FINAL
     WHERE {JOB_FILTER} AND role != 'moved')) AS open_incident,
  (SELECT round(sum(lost_gpu_hours), 2) FROM incident_jobs FINAL WHERE {JOB_FILTER})
    AS lost_gpu_hours
"""
"""The on-call's first look at the attempt (the latest one at All): its state and number,
the last step, how old the newest checkpoint saved by it or an earlier attempt is at the
attempt's end (a running attempt: at the end of the time range, at most now: the work a
failure would lose), the open incident touching it, and the GPU-hours lost to incidents."""

WHY = f"""
SELECT i.incident_id AS incident, i.severity AS severity, i.status AS status,
       concat(i.class, ' on ', i.entity) AS cause, i.owner AS owner,
       j.attempt AS attempt, j.failed_at AS failed_at, j.failure_step AS failure_step,
       j.recovery AS recovery, round(j.lost_gpu_hours, 2) AS lost_gpu_hours,
       i.explanation AS explanation
FROM (SELECT * FROM incident_jobs FINAL WHERE {JOB_FILTER} AND role = 'failed') AS j
INNER JOIN (SELECT * FROM incidents FINAL) AS i ON i.incident_id = j.incident_id
ORDER BY j.failed_at DESC, i.confidence DESC
LIMIT 1
"""
"""The incident that explains the job's (latest) failure: the one holding the failed attempt."""

BANDS = f"""
SELECT time, source, type AS state
FROM job_timeline FINAL
WHERE {JOB_FILTER} AND $__timeFilter_ms(time)
ORDER BY time
"""

STREAM = f"""
SELECT time AS timestamp, concat(type, '  ', message) AS body, severity AS level,
       source, type, relation, entity, link_path, attempt
FROM job_timeline FINAL
WHERE {JOB_FILTER} AND $__timeFilter_ms(time)
ORDER BY time DESC
LIMIT 5000
"""

_SPAN = ("concat(project, '/', job_id) AS traceID, concat('attempt ', toString(attempt)) AS "
         "serviceName")
ATTEMPTS = f"""
SELECT * FROM (
  SELECT {_SPAN}, concat(job_id, '-', toString(attempt)) AS spanID, '' AS parentSpanID,
         state AS operationName, coalesce(submitted_at, started_at) AS startTime,
         dateDiff('millisecond', coalesce(submitted_at, started_at),
                  coalesce(ended_at, now64(3))) AS duration,
         if(outcome IN ('failed', 'timeout', 'preempted'), 2, 0) AS statusCode
  FROM job_attempts FINAL
  WHERE {JOB_FILTER} AND coalesce(submitted_at, started_at) IS NOT NULL
  UNION ALL
  SELECT {_SPAN}, concat(job_id, '-', toString(attempt), '-queued') AS spanID,
         concat(job_id, '-', toString(attempt)) AS parentSpanID,
         concat('queued: ', arrayStringConcat(pending_reasons, ', ')) AS operationName,
         submitted_at AS startTime, toInt64(queue_wait_s * 1000) AS duration, 0 AS statusCode
  FROM job_attempts FINAL
  WHERE {JOB_FILTER} AND submitted_at IS NOT NULL AND queue_wait_s IS NOT NULL
  UNION ALL
  SELECT {_SPAN}, concat(job_id, '-', toString(attempt), '-running') AS spanID,
         concat(job_id, '-', toString(attempt)) AS parentSpanID,
         concat('running on ', toString(length(nodes)), ' nodes') AS operationName,
         started_at AS startTime,
         dateDiff('millisecond', started_at, coalesce(ended_at, now64(3))) AS duration,
         if(outcome IN ('failed', 'timeout', 'preempted'), 2, 0) AS statusCode
  FROM job_attempts FINAL
  WHERE {JOB_FILTER} AND started_at IS NOT NULL
)
ORDER BY startTime
"""

STEPS = f"""
SELECT time, concat('attempt ', toString(attempt)) AS series,
       JSONExtractInt(attributes, 'step') AS step
FROM job_timeline FINAL
WHERE {JOB_FILTER} AND type = 'job.step' AND $__timeFilter_ms(time)
ORDER BY time
"""
"""A series per attempt (the plugin makes a string column a label), so the step line breaks
between attempts instead of joining one's last step to the next one's restore. The label is
not called `attempt`: ClickHouse would resolve the filter's `toString(attempt)` to it."""

CHECKPOINTS = f"""
SELECT time, JSONExtractInt(attributes, 'step') AS checkpoint
FROM job_timeline FINAL
WHERE {JOB_FILTER} AND type IN ('checkpoint.saved', 'checkpoint.restored')
  AND $__timeFilter_ms(time)
ORDER BY time
"""
"""Drawn as markers (the override on target B), not as a line joining them across attempts."""

RESOURCES = f"""
SELECT * FROM (
  SELECT attempt, 'node' AS kind, arrayJoin(nodes) AS name, '' AS via
  FROM job_attempts FINAL WHERE {JOB_FILTER}
  UNION ALL
  SELECT attempt, 'filesystem' AS kind, arrayJoin(mounts) AS name, '' AS via
  FROM job_attempts FINAL WHERE {JOB_FILTER}
  UNION ALL
  SELECT attempt, relation AS kind, entity AS name, any(link_path) AS via
  FROM job_timeline FINAL
  WHERE {JOB_FILTER} AND relation IN ('nic', 'switch', 'target', 'filesystem')
  GROUP BY attempt, relation, entity
)
ORDER BY attempt, kind, name
"""

SOURCES = f"""
WITH ends AS (SELECT attempt, coalesce(ended_at, {VIEW_END}) AS attempt_end
              FROM job_attempts FINAL WHERE {JOB_FILTER})
SELECT h.attempt AS attempt, h.kind AS kind, h.key AS key, h.events AS events,
       if(h.events = 0, NULL, h.last_heard) AS last_heard,
       if(h.events = 0, NULL, round(dateDiff('second', h.last_heard, e.attempt_end) / 60, 1))
         AS quiet_before_end_min
FROM (
  SELECT attempt, kind, key, sum(n) AS events, max(last) AS last_heard FROM (
    SELECT attempt, kind, key, count() AS n, max(time) AS last FROM (
      SELECT attempt, time,
             multiIf(source = 'scheduler' AND relation = 'self', 'scheduler',
                     source = 'job' AND startsWith(entity, 'rank-'), 'rank log',
                     source = 'node', 'node log', source = 'network', 'fabric',
                     source = 'storage', 'storage', '') AS kind,
             multiIf(kind = 'scheduler', '', kind = 'rank log', entity,
                     kind = 'node log' AND node != '', node, splitByChar('/', entity)[1]) AS key
      FROM job_timeline FINAL WHERE {JOB_FILTER}
    ) WHERE kind != '' GROUP BY attempt, kind, key
    UNION ALL
    SELECT attempt, 'node log' AS kind, arrayJoin(nodes) AS key, 0 AS n,
           toDateTime64(0, 3, 'UTC') AS last
    FROM job_attempts FINAL WHERE {JOB_FILTER}
  ) GROUP BY attempt, kind, key
) AS h
INNER JOIN ends AS e ON e.attempt = h.attempt
ORDER BY attempt, kind, events = 0 DESC, quiet_before_end_min DESC, key
"""
"""What each source sent the attempt (its timeline rows grouped by source and node, rank,
switch or filesystem), every node of the attempt listed for the node log even when it sent
nothing, and how long each was quiet before the attempt's end: the facts `jobtrail
timeline`'s sources line and the MCP `completeness` tool judge."""

_MINE = ("SELECT incident_id FROM incident_jobs FINAL "
         "WHERE project = ${project:sqlstring} AND job_id = ${job:sqlstring} "
         "AND role != 'moved'")

INCIDENTS = """
SELECT i.incident_id AS incident, i.severity AS severity, i.status AS status, i.class AS class,
       i.entity AS entity, i.owner AS owner, j.attempt AS attempt, j.role AS role,
       j.recovery AS recovery, round(j.lost_gpu_hours, 2) AS lost_gpu_hours, i.opened_at AS opened,
       j.failed_at AS failed_at
FROM (SELECT * FROM incident_jobs FINAL
      WHERE project = ${project:sqlstring} AND job_id = ${job:sqlstring}
        AND role != 'moved') AS j
INNER JOIN (SELECT * FROM incidents FINAL) AS i ON i.incident_id = j.incident_id
ORDER BY opened DESC
"""

ANNOTATIONS = f"""
SELECT opened_at AS time, coalesce(resolved_at, last_signal_at) AS timeEnd,
       concat(severity, ' ', class, ' on ', entity, ' -> ', owner) AS text, class AS tags
FROM incidents FINAL
WHERE incident_id IN ({_MINE}) AND $__timeFilter_ms(opened_at)
"""

QUEUE = f"""
SELECT attempt, pending_times[i] AS since, pending_reasons[i] AS reason,
       queue_wait_s AS attempt_waited_s
FROM job_attempts FINAL
ARRAY JOIN arrayEnumerate(pending_times) AS i
WHERE {JOB_FILTER}
ORDER BY attempt, since
"""
"""One row per pending reason; indexed, so the two arrays need not be joined side by side
(an ARRAY JOIN of arrays of unequal length fails the whole query)."""


def _progress() -> Any:
    """Steps as a line per attempt (target A), checkpoints as markers (target B: a line
    would join one attempt's saves to the next one's restore), both in the legend."""
    points = [model.DynamicConfigValue(id_val="custom.drawStyle", value="points"),
              model.DynamicConfigValue(id_val="custom.showPoints", value="always"),
              model.DynamicConfigValue(id_val="custom.pointSize", value=9),
              model.DynamicConfigValue(id_val="displayName",
                                       value="checkpoint saved/restored")]
    return (panel(timeseries.Panel(), "Progress and checkpoints", STEPS, TIME_SERIES, w=12,
                  h=9, extra=[(CHECKPOINTS, TIME_SERIES)])
            .legend(common.VizLegendOptions().show_legend(True)
                    .display_mode(LegendDisplayMode.LIST)
                    .placement(LegendPlacement.BOTTOM).calcs([]))
            .override_by_query("B", points)
            .override_by_query("A", [model.DynamicConfigValue(
                id_val="displayName", value="step, ${__field.labels.series}")]))


def build() -> Any:
    annotation = (dash.AnnotationQuery().name("Incidents").datasource(datasource())
                  .enable(True).icon_color("red").target(sql(ANNOTATIONS, TABLE)))
    return (
        dash.Dashboard("jobtrail: job timeline").uid(JOB_UID).tags(["jobtrail"])
        .description("One job's cross-system timeline: scheduler, network, storage, node and "
                     "job events joined through the topology.")
        .time("now-6h", "now").refresh("30s").readonly()
        .with_variable(project_variable())
        .with_variable(variable("job", "Job",
                                "SELECT DISTINCT job_id FROM job_attempts FINAL "
                                "WHERE project = ${project:sqlstring} ORDER BY job_id"))
        .with_variable(variable("attempt", "Attempt",
                                "SELECT DISTINCT toString(attempt) FROM job_attempts FINAL "
                                "WHERE project = ${project:sqlstring} AND "
                                "job_id = ${job:sqlstring} ORDER BY attempt",
                                include_all=True))
        .annotation(annotation)
        .link(link("Incident", f"/d/{INCIDENT_UID}"))
        .with_panel(panel(stat.Panel(), "Summary", SUMMARY, TABLE, h=4,
                          description="The attempt's state (the latest one at All), the "
                                      "last step, the newest checkpoint's age, the open "
                                      "incident, GPU-h lost.")
                    .reduce_options(common.ReduceDataOptions().values(False)
                                    .calcs(["lastNotNull"]).fields("/.*/"))
                    .text_mode(BigValueTextMode.VALUE_AND_NAME))
        .with_panel(panel(table.Panel(), "Why it failed", WHY, TABLE, h=4,
                          description="The incident holding the failed attempt: its cause, "
                                      "owner and explanation.")
                    .data_links([to_incident()]))
        .with_panel(panel(statetimeline.Panel(), "Across systems", BANDS, TABLE, h=7,
                          description="One band per source; the state is the event type.")
                    .with_transformation(partition_by("source")))
        .with_panel(panel(logs.Panel(), "Event stream", STREAM, LOGS, h=12,
                          description="Every row of the job's timeline with its relation "
                                      "and the entity that links it to the job."))
        .with_panel(panel(dash.Panel().type("traces"), "Attempts and phases", ATTEMPTS,
                          TRACES, w=12, h=9))
        .with_panel(_progress())
        .with_panel(panel(table.Panel(), "Nodes, links and filesystems", RESOURCES, TABLE,
                          w=12, h=9)
                    .data_links([to_entity("name", project="${project}")]))
        .with_panel(panel(table.Panel(), "Incidents touching the job", INCIDENTS, TABLE,
                          w=12, h=9)
                    .data_links([to_incident(), to_entity("entity", project="${project}")]))
        .with_panel(panel(table.Panel(), "Queue wait and reasons", QUEUE, TABLE, h=6))
        .with_panel(panel(table.Panel(), "Sources heard (what the timeline lacks)", SOURCES,
                          TABLE, h=8,
                          description="Per attempt, what each source sent (scheduler, each "
                                      "rank's log, each node's log, fabric, storage) and how "
                                      "long it was quiet before the attempt's end; a node "
                                      "with 0 events sent nothing. The gaps: `jobtrail "
                                      "timeline`, `jobtrail incident show`, MCP completeness.")
                    .data_links([to_entity("key", project="${project}")]))
    )
