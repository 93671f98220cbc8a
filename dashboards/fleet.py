"""The fleet: incidents by class and owner, lost GPU-hours, time to detect/acknowledge/
recover, queue wait by reason, repeat-offender nodes and links, failure rate around
changes, follow-ups per team (overdue first) and postmortems not yet published; and the
continuous-operation panels (docs/reports.md): waiting GPU-hours by queue and cause, goodput
by project, node MTBI, and each change's verdict inputs."""

from __future__ import annotations

from typing import Any

from grafana_foundation_sdk.builders import barchart, table, timeseries
from grafana_foundation_sdk.builders import dashboard as dash

from dashboards.clickhouse import TABLE, TIME_SERIES
from dashboards.common import FLEET_UID, panel, to_incident
from processors.incidents.response import SQL as RESPONSE

# recovery drills (jobtrail drill run) are not failures of the fleet
_OPENED = ("$__timeFilter_ms(opened_at) AND NOT has(flags, 'drill') "
           "AND NOT has(flags, 'withdrawn')")

BY_CLASS = f"""
SELECT $__timeInterval_ms(opened_at) AS time, class, count() AS incidents
FROM incidents FINAL WHERE {_OPENED}
GROUP BY time, class ORDER BY time
"""

BY_OWNER = f"""
SELECT $__timeInterval_ms(opened_at) AS time, owner, count() AS incidents
FROM incidents FINAL WHERE {_OPENED}
GROUP BY time, owner ORDER BY time
"""

LOST = f"""
SELECT class AS cause, owner, round(sum(lost_gpu_hours), 2) AS lost_gpu_hours,
       count() AS incidents
FROM incidents FINAL WHERE {_OPENED}
GROUP BY cause, owner ORDER BY lost_gpu_hours DESC
"""

TIMES = f"""
SELECT pair.1 AS phase, round(quantileExactInclusive(0.5)(pair.2), 1) AS median_s,
       round(quantileExactInclusive(0.9)(pair.2), 1) AS p90_s, count() AS n
FROM (SELECT arrayJoin([('1 detect', detect_s), ('2 acknowledge', acknowledge_s),
                        ('3 mitigate', mitigate_s), ('4 recover', recover_s),
                        ('5 resolve', resolve_s)]) AS pair
      FROM ({RESPONSE}) AS response
      WHERE incident_id IN (SELECT incident_id FROM incidents FINAL WHERE {_OPENED}))
WHERE pair.2 IS NOT NULL
GROUP BY phase ORDER BY phase
"""
"""Each phase's time from the first signal, by the definition the postmortem uses
(`processors.incidents.response`), over the incidents opened in the range."""

QUEUE = """
SELECT reason, count() AS waits, round(avg(queue_wait_s), 1) AS avg_attempt_wait_s
FROM job_attempts FINAL ARRAY JOIN pending_reasons AS reason
WHERE submitted_at IS NOT NULL AND $__timeFilter_ms(submitted_at)
GROUP BY reason ORDER BY waits DESC
"""

OFFENDERS = f"""
SELECT kind, entity, incidents, lost_gpu_hours, standing FROM (
  SELECT if(class = 'network', 'link', 'node') AS kind,
         if(class = 'network', cause_entity, splitByChar('/', cause_entity)[1]) AS entity,
         count() AS incidents, round(sum(lost_gpu_hours), 2) AS lost_gpu_hours, '' AS standing
  FROM incidents FINAL
  WHERE class IN ('network', 'gpu_hardware', 'nvlink', 'node_failure') AND {_OPENED}
  GROUP BY kind, entity
  UNION ALL
  SELECT 'node' AS kind, entity, length(linked) AS incidents, 0 AS lost_gpu_hours,
         incident_id AS standing
  FROM incidents FINAL WHERE class = 'repeat_offender' AND {_OPENED}
)
ORDER BY incidents DESC, lost_gpu_hours DESC LIMIT 30
"""

CHANGES = """
SELECT c.time AS change_time, c.entity AS target,
       JSONExtractString(c.attributes, 'kind') AS kind,
       JSONExtractString(c.attributes, 'after') AS after,
       countIf(a.ended_at >= c.time - INTERVAL 1 DAY AND a.ended_at < c.time
               AND a.outcome = 'failed') AS failed_before,
       countIf(a.ended_at >= c.time - INTERVAL 1 DAY AND a.ended_at < c.time) AS ended_before,
       countIf(a.ended_at >= c.time AND a.ended_at < c.time + INTERVAL 1 DAY
               AND a.outcome = 'failed') AS failed_after,
       countIf(a.ended_at >= c.time AND a.ended_at < c.time + INTERVAL 1 DAY) AS ended_after
FROM (SELECT time, entity, attributes FROM events FINAL
      WHERE type = 'change.applied' AND $__timeFilter_ms(time)) AS c
CROSS JOIN (SELECT ended_at, outcome FROM job_attempts FINAL WHERE ended_at IS NOT NULL) AS a
GROUP BY change_time, target, kind, after ORDER BY change_time
"""

WAITING = """
SELECT named_queue AS queue, multiIf(
         lower(reason) IN ('resources', 'resource', 'unschedulable'), 'resources',
         position(lower(reason), 'priority') > 0, 'priority',
         match(lower(reason), 'qos|assoc|limit|fairshare|quota'), 'quota',
         match(lower(reason), 'reqnodenotavail|nodedown|drain'), 'nodes_down',
         match(lower(reason), 'image|pull|containercreating|staging|prolog'), 'pulls',
         'other') AS cause,
       round(sum(gpus * dateDiff('millisecond', greatest(t, $__fromTime_ms),
                                 least(next_t, $__toTime_ms)) / 1000) / 3600, 2)
         AS waiting_gpu_hours
FROM (SELECT if(queue = '', 'default', queue) AS named_queue, gpus,
             pending_reasons[i] AS reason, pending_times[i] AS t,
             if(i < length(pending_times), pending_times[i + 1],
                coalesce(started_at, ended_at, least(now64(3), $__toTime_ms))) AS next_t
      FROM job_attempts FINAL
      ARRAY JOIN arrayEnumerate(pending_times) AS i
      WHERE i <= length(pending_reasons))
WHERE next_t > $__fromTime_ms AND t < $__toTime_ms AND gpus > 0
GROUP BY named_queue, cause ORDER BY waiting_gpu_hours DESC
"""
"""Each pending reason from its time to the next reason or the attempt's start (its end, or
the range's end if it still waits), clipped to the time range, as `jobtrail report
capacity` cuts them. Indexed rather than ARRAY JOIN-ing arrays side by side: an attempt that
never waited has no pending times, and arrays of unequal length fail the whole query."""

GOODPUT = """
SELECT a.project AS project, round(a.run, 1) AS run_gpu_hours,
       round(ifNull(l.lost, 0), 2) AS failure_gpu_hours,
       round(1 - ifNull(l.lost, 0) / a.run, 4) AS goodput_ratio
FROM (SELECT project, sum(gpus * dateDiff('millisecond', started_at,
                                          ifNull(ended_at, now64(3))) / 1000) / 3600 AS run
      FROM job_attempts FINAL
      WHERE started_at IS NOT NULL AND $__timeFilter_ms(started_at)
      GROUP BY project HAVING run > 0) AS a
LEFT JOIN (SELECT project, sum(lost_gpu_hours) AS lost FROM incident_jobs FINAL
           WHERE failed_at IS NOT NULL AND $__timeFilter_ms(failed_at)
           GROUP BY project) AS l ON a.project = l.project
ORDER BY failure_gpu_hours DESC
"""

MTBI = f"""
SELECT splitByChar('/', if(cause_entity != '', cause_entity, entity))[1] AS node,
       count() AS incidents,
       round(dateDiff('second', $__fromTime, $__toTime) / 3600 / count(), 1) AS mtbi_hours
FROM incidents FINAL WHERE {_OPENED} AND node LIKE 'node%'
GROUP BY node ORDER BY incidents DESC, node LIMIT 20
"""

OPEN = """
SELECT incident_id AS incident, severity, status, class, entity, owner, impacted_jobs,
       round(lost_gpu_hours, 2) AS lost_gpu_hours, opened_at
FROM incidents FINAL WHERE status NOT IN ('resolved', 'closed')
ORDER BY severity, opened_at DESC LIMIT 100
"""

FOLLOWUPS = """
SELECT owner AS team, countIf(late) AS overdue, count() AS open,
       minIf(due, late) AS oldest_overdue_due
FROM (SELECT owner, due,
             due != '' AND due < toString(today()) AS late
      FROM actions FINAL WHERE status IN ('proposed', 'open'))
GROUP BY team ORDER BY overdue DESC, open DESC, team
"""

POSTMORTEMS = f"""
SELECT incident_id AS incident, severity, class, owner,
       if(postmortem_status = '', 'not drafted', postmortem_status) AS postmortem,
       postmortem_owner, postmortem_due AS due,
       postmortem_due != '' AND postmortem_due < toString(today()) AS overdue
FROM incidents FINAL
WHERE severity IN ('sev1', 'sev2') AND postmortem_status NOT IN ('published', 'waived')
  AND {_OPENED}
ORDER BY overdue DESC, due, incident_id LIMIT 100
"""


def build() -> Any:
    return (
        dash.Dashboard("jobtrail: fleet").uid(FLEET_UID).tags(["jobtrail"])
        .description("Failures across the fleet: what breaks, who owns it, what it costs.")
        .time("now-30d", "now").refresh("5m").readonly()
        .with_panel(panel(table.Panel(), "Open incidents", OPEN, TABLE, h=8)
                    .data_links([to_incident()]))
        .with_panel(panel(timeseries.Panel(), "Incidents by class", BY_CLASS, TIME_SERIES,
                          w=12))
        .with_panel(panel(timeseries.Panel(), "Incidents by owner", BY_OWNER, TIME_SERIES,
                          w=12))
        .with_panel(panel(barchart.Panel(), "Lost GPU-hours by cause and owner", LOST, TABLE,
                          w=12))
        .with_panel(panel(table.Panel(), "Time to detect, acknowledge, recover", TIMES,
                          TABLE, w=12, description="Seconds from the first signal to each "
                          "milestone, as the postmortem counts them (median, p90, "
                          "incidents)."))
        .with_panel(panel(barchart.Panel(), "Queue wait by reason", QUEUE, TABLE, w=12))
        .with_panel(panel(table.Panel(), "Repeat offenders: nodes and links", OFFENDERS,
                          TABLE, w=12))
        .with_panel(panel(table.Panel(), "Failure rate a day before and after each change",
                          CHANGES, TABLE))
        .with_panel(panel(barchart.Panel(), "Waiting GPU-hours by queue and cause", WAITING,
                          TABLE, w=12, description="Scheduler reasons; `jobtrail report "
                          "capacity` splits `resources` into capacity, fragmentation, "
                          "topology and nodes down."))
        .with_panel(panel(table.Panel(), "Goodput by project: run and failure GPU-hours",
                          GOODPUT, TABLE, w=12, description="Failure GPU-hours as the "
                          "incidents counted them; per job: `jobtrail report goodput`."))
        .with_panel(panel(table.Panel(), "Node MTBI: mean time between incidents", MTBI,
                          TABLE, w=12, description="The lemon signal: hours of the range "
                          "per incident on the node."))
        .with_panel(panel(table.Panel(), "Open follow-ups by team", FOLLOWUPS, TABLE, w=12,
                          description="Proposed or open actions; overdue: past their due "
                                      "date (`jobtrail followups --overdue`)."))
        .with_panel(panel(table.Panel(), "Postmortems not yet published (sev1-2)",
                          POSTMORTEMS, TABLE)
                    .data_links([to_incident()]))
    )
