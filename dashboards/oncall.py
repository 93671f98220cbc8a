"""What the on-call engineer acts on now: incidents nobody has acknowledged (with their age
and owner), jobs failing or waiting, and nodes drained or not ready. "Now" is the end of the
time range, never later than the clock (`VIEW_END`): a past range shows what was pending
then, and the ages it had."""

from __future__ import annotations

from typing import Any

from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import stat, table

from dashboards.clickhouse import TABLE
from dashboards.common import (
    FLEET_UID,
    ONCALL_UID,
    VIEW_END,
    link,
    panel,
    to_entity,
    to_incident,
    to_job,
)

UNACKNOWLEDGED = f"""
SELECT incident_id AS incident, severity, class, entity, owner,
       round(dateDiff('millisecond', opened_at, {VIEW_END}) / 60000, 1) AS age_min,
       opened_at, impacted_jobs, impacted_gpus, round(lost_gpu_hours, 2) AS lost_gpu_hours,
       owner_why
FROM incidents FINAL
WHERE status = 'open' AND acknowledged_at IS NULL AND opened_at <= {VIEW_END}
  AND NOT has(flags, 'withdrawn') AND NOT has(flags, 'drill')
ORDER BY severity, opened_at, incident_id
LIMIT 200
"""
"""Open and not acknowledged, oldest first within a severity (an incident is acknowledged,
mitigated or resolved by a person: each takes it off this list)."""

COUNTS = f"""
SELECT countIf(severity = 'sev1') AS sev1, countIf(severity = 'sev2') AS sev2,
       count() AS unacknowledged,
       round(max(dateDiff('millisecond', opened_at, {VIEW_END})) / 60000, 1) AS oldest_min
FROM incidents FINAL
WHERE status = 'open' AND acknowledged_at IS NULL AND opened_at <= {VIEW_END}
  AND NOT has(flags, 'withdrawn') AND NOT has(flags, 'drill')
"""

JOBS = f"""
SELECT project, job_id, attempt, now_state AS state, since,
       round(dateDiff('millisecond', since, {VIEW_END}) / 60000, 1) AS minutes, why, gpus,
       queue
FROM (
  SELECT project, job_id, attempt, gpus, queue,
         multiIf(started_at IS NULL AND ended_at IS NULL, 'waiting',
                 outcome IN ('failed', 'timeout', 'preempted', 'requeued'), outcome,
                 'other') AS now_state,
         if(now_state = 'waiting',
            if(empty(pending_times), submitted_at, pending_times[1]), ended_at) AS since,
         if(now_state = 'waiting', pending_reasons[-1],
            if(end_reason != '', end_reason, outcome)) AS why
  FROM (SELECT * FROM job_attempts FINAL
        ORDER BY project, job_id, attempt DESC LIMIT 1 BY project, job_id)
)
WHERE (now_state = 'waiting' AND (since IS NULL OR since <= {VIEW_END}))
   OR (now_state NOT IN ('waiting', 'other') AND $__timeFilter_ms(since))
ORDER BY state = 'waiting', since, project, job_id
LIMIT 500
"""
"""Each job's latest attempt: waiting (submitted, not started: since its first pending reason,
with the last one), or ended failed, timed out, preempted or requeued in the range with no
newer attempt yet."""

DRAINED = f"""
SELECT node, since, round(dateDiff('millisecond', since, {VIEW_END}) / 60000, 1) AS minutes,
       last_type AS state, reason, open_incidents
FROM (
  SELECT node, argMax(type, (time, id)) AS last_type, argMax(message, (time, id)) AS reason,
         minIf(time, type != 'node.ready' AND time > back_at) AS since
  FROM (SELECT node, type, time, id, message,
               max(if(type = 'node.ready', time, toDateTime64(0, 3, 'UTC')))
                 OVER (PARTITION BY node) AS back_at
        FROM (SELECT if(node != '', node, splitByChar('/', entity)[1]) AS node, type, time,
                     id, message
              FROM events FINAL
              WHERE type IN ('node.drained', 'node.not_ready', 'node.ready')
                AND project = '' AND time <= {VIEW_END}))
  GROUP BY node
  HAVING last_type != 'node.ready'
) AS d
LEFT JOIN (SELECT splitByChar('/', if(cause_entity != '', cause_entity, entity))[1] AS at_node,
                  arrayStringConcat(groupArray(incident_id), ', ') AS open_incidents
           FROM incidents FINAL
           WHERE status NOT IN ('resolved', 'closed') AND NOT has(flags, 'withdrawn')
           GROUP BY at_node) AS i ON i.at_node = d.node
ORDER BY since, node
"""
"""A node is out from its first `node.drained` / `node.not_ready` after its last
`node.ready` (the capacity report's outage; the cluster's own events: a project's job cannot
drain a node), with the open incidents on it."""


def build() -> Any:
    return (
        dash.Dashboard("jobtrail: on-call").uid(ONCALL_UID).tags(["jobtrail"])
        .description("What needs a person now: unacknowledged incidents, jobs failing or "
                     "waiting, nodes out.")
        .time("now-24h", "now").refresh("30s").readonly()
        .link(link("Fleet", f"/d/{FLEET_UID}"))
        .with_panel(panel(stat.Panel(), "Waiting for a person", COUNTS, TABLE, h=4))
        .with_panel(panel(table.Panel(), "Unacknowledged incidents", UNACKNOWLEDGED, TABLE,
                          h=8, description="Open, nobody has acknowledged them: age (min) "
                          "at the end of the range, owner and why.")
                    .data_links([to_incident(), to_entity()]))
        .with_panel(panel(table.Panel(), "Jobs failing or waiting now", JOBS, TABLE, w=14,
                          h=9)
                    .data_links([to_job(attempt="${__data.fields.attempt}")]))
        .with_panel(panel(table.Panel(), "Nodes drained or not ready now", DRAINED, TABLE,
                          w=10, h=9)
                    .data_links([to_entity("node")]))
    )
