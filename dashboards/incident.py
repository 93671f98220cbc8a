"""One incident: status, cause and explanation, owner, impact, its own log, evidence linked
back to job timelines, recovery milestones, the postmortem (status, due date, a link to its
review page) and follow-up actions."""

from __future__ import annotations

from typing import Any

from grafana_foundation_sdk.builders import common, logs, stat, table
from grafana_foundation_sdk.builders import dashboard as dash

from dashboards.clickhouse import LOGS, TABLE
from dashboards.common import (
    FLEET_UID,
    INCIDENT_UID,
    JOBTRAIL_URL,
    jobtrail_url_variable,
    link,
    panel,
    to_entity,
    to_job,
    variable,
)
from processors.incidents.response import SQL as RESPONSE_SQL

_ONE = "incident_id = ${incident:sqlstring}"

SUMMARY = f"""
SELECT status, severity, class, entity, owner, owner_why, round(confidence, 2) AS confidence,
       explanation, severity_why, opened_at, acknowledged_at, mitigated_at, resolved_at
FROM incidents FINAL WHERE {_ONE}
"""

IMPACT = f"""
SELECT impacted_jobs, impacted_gpus, round(lost_gpu_hours, 2) AS lost_gpu_hours, lost_steps
FROM incidents FINAL WHERE {_ONE}
"""

JOBS = f"""
SELECT project, job_id, attempt, role, gpus, failed_at, failure_step, last_checkpoint_step,
       restored_step, recovery, round(lost_gpu_hours, 2) AS lost_gpu_hours, lost_steps,
       duplicate_run
FROM incident_jobs FINAL WHERE {_ONE} AND role != 'moved'
ORDER BY project, job_id, attempt
"""

LOG = f"""
SELECT time AS timestamp,
       concat('#', toString(seq), ' ', kind, ' by ', actor_kind, ':', actor,
              if(rule = '', '', concat(' (rule ', rule, ')'))) AS body,
       if(kind IN ('opened', 'reopened', 'severity_changed'), 'warning', 'info') AS level,
       kind, data
FROM incident_log FINAL WHERE {_ONE}
ORDER BY seq
"""

EVIDENCE = f"""
SELECT time, role, type, source, entity, why, project, job_id, attempt, event_id
FROM incident_evidence FINAL WHERE {_ONE} AND role != 'moved'
ORDER BY time, event_id
"""

RESPONSE = f"""
SELECT first_signal_at, detect_s, acknowledge_s, mitigate_s, recover_s, resolve_s
FROM ({RESPONSE_SQL}) AS response WHERE {_ONE}
"""
"""Seconds from the first signal to each milestone: the postmortem's "Response times"."""

RECOVERY = f"""
SELECT project, job_id, attempt, failed_at, restarted_job, restarted_attempt, restarted_at,
       restored_step, resumed_at, verified_at, recovery
FROM incident_jobs FINAL WHERE {_ONE} AND role = 'failed'
ORDER BY project, job_id, attempt
"""

ACTIONS = f"""
SELECT action_id, title, kind, owner, priority, status, due,
       status IN ('proposed', 'open') AND due != '' AND due < toString(today()) AS overdue,
       tracker
FROM actions FINAL WHERE {_ONE} ORDER BY action_id
"""

POSTMORTEM = f"""
SELECT if(postmortem_status = '', 'not drafted', postmortem_status) AS postmortem,
       postmortem_owner AS owner, postmortem_due AS due,
       postmortem_due != '' AND postmortem_due < toString(today())
         AND postmortem_status NOT IN ('published', 'waived') AS overdue,
       severity
FROM incidents FINAL WHERE {_ONE}
"""
_REVIEW_PAGE = "${" + JOBTRAIL_URL + "}/incidents/${incident}/postmortem"


def build() -> Any:
    return (
        dash.Dashboard("jobtrail: incident").uid(INCIDENT_UID).tags(["jobtrail"])
        .description("One incident, as its event log tells it.")
        .time("now-7d", "now").refresh("1m").readonly()
        .with_variable(variable("incident", "Incident",
                                "SELECT incident_id FROM incidents FINAL "
                                "ORDER BY opened_at DESC LIMIT 500"))
        .with_variable(jobtrail_url_variable())
        .link(link("Fleet", f"/d/{FLEET_UID}"))
        .link(link("Postmortem review page", _REVIEW_PAGE))
        .with_panel(panel(table.Panel(), "Status, cause and owner", SUMMARY, TABLE, h=6)
                    .data_links([to_entity()]))
        .with_panel(panel(stat.Panel(), "Impact", IMPACT, TABLE, w=8, h=6))
        .with_panel(panel(table.Panel(), "Impacted jobs", JOBS, TABLE, w=16, h=6)
                    .data_links([to_job(attempt="${__data.fields.attempt}")]))
        .with_panel(panel(stat.Panel(), "Response times", RESPONSE, TABLE, h=4,
                          description="Seconds from the first signal to detection, "
                                      "acknowledgement, mitigation, recovery (progress "
                                      "resumed in every failed attempt) and resolution.")
                    .reduce_options(common.ReduceDataOptions().values(False)
                                    .calcs(["lastNotNull"]).fields("/.*/")))
        .with_panel(panel(logs.Panel(), "Incident log", LOG, LOGS, h=10))
        .with_panel(panel(table.Panel(), "Evidence", EVIDENCE, TABLE, h=10)
                    .data_links([to_job(), to_entity()]))
        .with_panel(panel(table.Panel(), "Recovery milestones", RECOVERY, TABLE, w=14, h=6))
        .with_panel(panel(table.Panel(), "Postmortem", POSTMORTEM, TABLE, w=10, h=6)
                    .data_links([link("Review page", _REVIEW_PAGE)]))
        .with_panel(panel(table.Panel(), "Follow-up actions", ACTIONS, TABLE, h=6)
                    .data_links([link("Tracker", "${__data.fields.tracker}")]))
    )
