"""The incident log and its projections in ClickHouse: writes, and reads bound to the
caller's projects (a `Store` part, split from store.py by concern).

Every read takes `projects` (None: an operator) and binds them as server-side parameters; what
a caller may see of a shared incident is narrowed by `jobtrail.views.incident`.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pydantic_core import to_json

from processors.incidents.aggregate import still_drained
from processors.incidents.model import Incident, IncidentEvent

RETENTION_COLUMNS = ("incident_id", "version", "status", "closed_at", "postmortem_status")
"""The columns of `incidents` copied to `incident_retention` (jobtrail.reports.retention)."""

INCIDENT_LIST = ("incident_id, cluster, status, severity, class, entity, owner, title, "
                 "opened_at, resolved_at, impacted_jobs, impacted_gpus, lost_gpu_hours, "
                 "loss_unknown, recovery, projects, confidence")


def shown(row: dict[str, Any]) -> dict[str, Any]:
    """A row as people read it: a loss no source could count (`loss_unknown`) with nothing
    counted is `lost_gpu_hours: null`, never 0.0; one partly counted keeps its figure (a
    lower bound) beside the reason."""
    if row.get("loss_unknown") and not row.get("lost_gpu_hours"):
        row["lost_gpu_hours"] = None
    if row.get("loss_unknown"):  # a GPU count no source said is unknown, not 0
        for name in ("gpus", "impacted_gpus"):
            if name in row and not row[name]:
                row[name] = None
    return row


def confidence(stored: Any) -> float:
    """A cause's confidence as it was decided: the column is Float32, which reads back as
    0.8500000238418579 for 0.85 (four decimals are more than any rule states)."""
    return round(float(stored), 4)


class IncidentTables:
    client: Any
    database: str
    cluster: str

    if TYPE_CHECKING:
        def _q(self, sql: str, **parameters: Any) -> Any: ...

        def _dicts(self, sql: str, **parameters: Any) -> list[dict[str, Any]]: ...

        def _insert_json(self, table: str, lines: list[bytes], token: str | None,
                         columns: list[str] | None = None) -> None: ...

    def write_incidents(self, log: Sequence[IncidentEvent], states: Sequence[Incident],
                        token: str | None = None) -> None:
        """The incident log and the touched incidents' projections (log first)."""
        from processors.incidents.projection import log_row, projection_rows

        self._insert_json("incident_log", [to_json(log_row(e)) for e in log], token)
        changes = list(log) if log else None
        for table, rows in projection_rows(list(states), changes).items():
            self._insert_json(table, [to_json(r) for r in rows], token)
            if table == "incidents":  # what the retention TTLs ask (0020_retention.sql)
                self._insert_json("incident_retention", [to_json(
                    {k: r[k] for k in RETENTION_COLUMNS}) for r in rows], token)

    def load_incident_log(self) -> list[IncidentEvent]:
        return self._log_events(self._dicts(
            "SELECT id, incident_id, seq, kind, time, actor_kind, actor, rule, credential, data, "
            "command_id FROM incident_log FINAL ORDER BY incident_id, seq"))

    @staticmethod
    def _log_events(rows: list[dict[str, Any]]) -> list[IncidentEvent]:
        from processors.incidents.model import Actor

        return [IncidentEvent(id=r["id"], incident_id=r["incident_id"], seq=r["seq"],
                              kind=r["kind"], time=r["time"],
                              actor=Actor(kind=r["actor_kind"], name=r["actor"], rule=r["rule"],
                                          credential=r.get("credential") or ""),
                              data=json.loads(r["data"]), command_id=r["command_id"])
                for r in rows]

    def incident_log(self, incident_id: str) -> list[IncidentEvent]:
        """One incident's log, in order (the postmortem is folded from it on read)."""
        return self._log_events(self._dicts(
            "SELECT id, incident_id, seq, kind, time, actor_kind, actor, rule, credential, data, "
            "command_id FROM incident_log FINAL WHERE incident_id = {id:String} ORDER BY seq",
            id=incident_id))

    def incidents_on(self, entities: Collection[str]) -> list[str]:
        """Ids of the incidents whose entity or cause entity is one of these (the processors'
        archive: a postmortem draft lists the prior incidents on its entity)."""
        result = self._q(
            "SELECT DISTINCT incident_id FROM incidents FINAL WHERE entity IN {e:Array(String)} "
            "OR cause_entity IN {e:Array(String)} ORDER BY incident_id", e=sorted(entities))
        return [str(r[0]) for r in result.result_rows]

    def followups(self, projects: Sequence[str] | None, *, team: str = "",
                  overdue_on: str = "", status: str = "") -> list[dict[str, Any]]:
        """Follow-up actions across incidents, bound to the caller's projects as the
        incident view binds them (`jobtrail.views.incident.detail`): an action added by a
        project shows to that project only; one added by nobody's project (the processors'
        proposals, an operator's) shows to every project the incident touches. `overdue_on`
        (an ISO date) keeps those still open and due before it."""
        return self._dicts(
            "SELECT a.incident_id AS incident_id, a.action_id AS action_id, a.title AS title, "
            "a.owner AS owner, a.status AS status, a.due AS due, a.kind AS kind, "
            "a.priority AS priority, a.tracker AS tracker, i.severity AS severity, "
            "i.class AS class, i.entity AS entity "
            "FROM (SELECT * FROM actions FINAL) AS a "
            "INNER JOIN (SELECT incident_id, severity, class, entity, projects FROM incidents "
            "FINAL) AS i ON a.incident_id = i.incident_id "
            "WHERE ({all:Bool} OR (empty(a.projects) AND hasAny(i.projects, "
            "{projects:Array(String)})) OR hasAny(a.projects, {projects:Array(String)})) "
            "AND ({team:String} = '' OR a.owner = {team:String}) "
            "AND ({status:String} = '' OR a.status = {status:String}) "
            "AND ({overdue:String} = '' OR (a.status IN ('open', 'proposed') AND a.due != '' "
            "AND a.due < {overdue:String})) ORDER BY a.owner, a.due, a.incident_id, a.action_id",
            all=projects is None, projects=list(projects or []), team=team, status=status,
            overdue=overdue_on)

    def replay_incidents(self) -> tuple[int, int]:
        """Rebuild every incident projection from the log; returns (events, incidents)."""
        from processors.incidents.model import fold

        log = self.load_incident_log()
        states = fold(log)
        for table in ("incidents", "incident_evidence", "incident_jobs", "actions"):
            # a Distributed table cannot be truncated: its shards' local tables are
            self.client.command(
                f"TRUNCATE TABLE IF EXISTS {self.database}.{table}_local ON CLUSTER "
                f"{self.cluster}" if self.cluster else
                f"TRUNCATE TABLE IF EXISTS {self.database}.{table}")
        self.write_incidents([], list(states.values()))
        return len(log), len(states)

    def incidents(self, projects: Sequence[str] | None, *, status: str = "",
                  since: datetime | None = None, limit: int = 200,
                  infrastructure: bool = False) -> list[dict[str, Any]]:
        """Incidents touching the caller's projects, newest first, each as that caller may
        see it (`jobtrail.views.incident`). Infrastructure-only incidents (they touched no
        job: a switch flapping under idle nodes) are kept and queryable, listed only with
        `infrastructure` and only to operators. An incident the events in time order do
        not give (withdrawn into the one that now holds its attempts) is not listed; it is
        still there by its id, saying where its attempts went."""
        from jobtrail.views.incident import summary

        rows = self._dicts(
            f"SELECT {INCIDENT_LIST} FROM incidents FINAL "
            "WHERE ({all:Bool} OR hasAny(projects, {projects:Array(String)})) "
            "AND ({infra:Bool} OR length(projects) > 0) "
            "AND ({status:String} = '' OR status = {status:String}) "
            "AND NOT has(flags, 'withdrawn') "
            "AND opened_at >= {since:DateTime64(3, 'UTC')} "
            "ORDER BY opened_at DESC, incident_id LIMIT {limit:UInt32}",
            all=projects is None, projects=list(projects or []), status=status,
            since=since or datetime(1970, 1, 1, tzinfo=UTC), limit=limit,
            infra=infrastructure and projects is None)
        for row in rows:
            row["confidence"] = confidence(row["confidence"])
        rows = [shown(r) for r in rows]
        if projects is None or not rows:
            return rows
        jobs: dict[str, list[dict[str, Any]]] = {}
        for job in self._dicts(
                "SELECT incident_id, project, job_id, attempt, role, gpus, lost_gpu_hours, "
                "loss_unknown, lost_steps, recovery FROM incident_jobs FINAL "
                "WHERE incident_id IN {ids:Array(String)} AND role != 'moved'",
                ids=[r["incident_id"] for r in rows]):
            jobs.setdefault(job["incident_id"], []).append(shown(job))
        return [summary(r, jobs.get(r["incident_id"], []), projects) for r in rows]

    def incident(self, incident_id: str,
                 projects: Sequence[str] | None) -> dict[str, Any] | None:
        """One incident with its impacted jobs, evidence, actions and log, or None when it
        does not exist or touches none of the caller's projects; narrowed to what the
        caller may see (`jobtrail.views.incident.detail`)."""
        from jobtrail.views.incident import detail

        rows = self._dicts(
            "SELECT * FROM incidents FINAL WHERE incident_id = {id:String} "
            "AND ({all:Bool} OR hasAny(projects, {projects:Array(String)}))",
            id=incident_id, all=projects is None, projects=list(projects or []))
        if not rows:
            return None
        out = shown(rows[0])
        out["confidence"] = confidence(out["confidence"])
        out["jobs"] = [shown(j) for j in self._dicts(
            "SELECT * EXCEPT version FROM incident_jobs FINAL WHERE incident_id = {id:String} "
            "AND role != 'moved' ORDER BY project, job_id, attempt", id=incident_id)]
        out["evidence"] = self._dicts(
            "SELECT * EXCEPT incident_id FROM incident_evidence FINAL "
            "WHERE incident_id = {id:String} AND role != 'moved' ORDER BY time, event_id",
            id=incident_id)
        out["actions"] = self._dicts(
            "SELECT action_id, title, owner, status, due, projects, kind, priority, tracker, "
            "reason, why, rule FROM actions FINAL "
            "WHERE incident_id = {id:String} ORDER BY action_id", id=incident_id)
        out["log"] = self._dicts(
            "SELECT id, seq, kind, time, actor_kind, actor, rule, credential, data, command_id "
            "FROM incident_log FINAL WHERE incident_id = {id:String} ORDER BY seq",
            id=incident_id)
        for entry in out["log"]:
            entry["data"] = json.loads(entry["data"])
        out["still_drained"] = [{"node": node, "since": since} for node, since in still_drained(
            (e["time"], e["type"], e["entity"], e["role"]) for e in out["evidence"])]
        if projects is not None and out.get("linked"):  # only those the caller may read
            out["linked"] = [str(r[0]) for r in self._q(
                "SELECT incident_id FROM incidents FINAL WHERE incident_id IN "
                "{ids:Array(String)} AND hasAny(projects, {projects:Array(String)}) "
                "ORDER BY incident_id", ids=list(out["linked"]),
                projects=list(projects)).result_rows]
        return detail(out, projects)

    def impact_recorded_at(self, incident_id: str, project: str, job_id: str,
                           attempt: int) -> datetime | None:
        """When the incident first held the attempt (its `job_impacted` entry was written:
        wall clock, not event time), or None."""
        result = self._q(
            "SELECT min(recorded_at) FROM incident_log WHERE incident_id = {id:String} "
            "AND kind = 'job_impacted' AND JSONExtractString(data, 'job', 'project') = "
            "{p:String} AND JSONExtractString(data, 'job', 'job_id') = {j:String} "
            "AND JSONExtractUInt(data, 'job', 'attempt') = {a:UInt32}",
            id=incident_id, p=project, j=job_id, a=attempt)
        value = result.result_rows[0][0] if result.result_rows else None
        if not isinstance(value, datetime) or value.year < 1971:
            return None
        return value if value.tzinfo else value.replace(tzinfo=UTC)

    def incident_clusters(self) -> dict[str, str]:
        """Every incident's cluster (as `incident_cluster`), for a restore that rebuilds one
        pipeline per cluster."""
        result = self._q(
            "SELECT incident_id, min(cluster) FROM (SELECT e.incident_id AS incident_id, "
            "e.event_id AS event_id FROM incident_evidence AS e UNION ALL SELECT incident_id, "
            "JSONExtractString(data, 'first_event') FROM incident_log WHERE kind = 'opened') "
            "AS refs INNER JOIN event_ids AS ids ON ids.id = refs.event_id "
            "GROUP BY incident_id")
        return {str(r[0]): str(r[1]) for r in result.result_rows}

    def incident_cluster(self, incident_id: str) -> str | None:
        """The cluster whose events an incident was decided from (commands are keyed by it),
        or None when none of its events is stored."""
        result = self._q(
            "SELECT cluster FROM event_ids WHERE id IN (SELECT event_id FROM incident_evidence "
            "WHERE incident_id = {id:String} UNION ALL SELECT JSONExtractString(data, "
            "'first_event') FROM incident_log WHERE incident_id = {id:String} "
            "AND kind = 'opened') ORDER BY cluster LIMIT 1", id=incident_id)
        return str(result.result_rows[0][0]) if result.result_rows else None

    def incidents_of_events(self, project: str, event_ids: Sequence[str]
                            ) -> dict[str, tuple[str, str]]:
        """event id -> (incident id, its title) for the events that are evidence of an
        incident touching `project` (a job timeline names the incident of each row)."""
        if not event_ids:
            return {}
        rows = self._dicts(
            "SELECT e.event_id AS event_id, e.incident_id AS incident_id, i.title AS title "
            "FROM (SELECT event_id, incident_id FROM incident_evidence FINAL "
            "WHERE event_id IN {ids:Array(String)} AND role != 'moved') AS e "
            "INNER JOIN (SELECT incident_id, title FROM incidents FINAL "
            "WHERE has(projects, {project:String}) AND NOT has(flags, 'withdrawn')) AS i "
            "ON e.incident_id = i.incident_id ORDER BY e.event_id, e.incident_id",
            ids=sorted(set(event_ids)), project=project)
        out: dict[str, tuple[str, str]] = {}
        for r in rows:
            out.setdefault(str(r["event_id"]), (str(r["incident_id"]), str(r["title"])))
        return out
