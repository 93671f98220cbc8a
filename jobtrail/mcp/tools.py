"""The tools' arguments, as JSON Schema the agent reads and pydantic models that check them.

Every model forbids fields it does not define (a misspelt `atempt` is refused naming it,
never ignored into a wider answer), bounds every string and number, and wants times with a
zone. Descriptions are written for the agent: what the tool answers, what it cites.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

Name = Field(min_length=1, max_length=200)
Projects: Any = Field(default_factory=list, max_length=50,
                 description="Projects to look in (default: every project the credential "
                             "may read)")
SOURCES = ("scheduler", "network", "storage", "node", "job", "change", "operator", "topology")
INCIDENT_STATUSES = ("open", "acknowledged", "mitigated", "resolved", "closed")


class Args(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class Paged(Args):
    cursor: str | None = Field(None, max_length=400,
                        description="next_cursor from the previous page of the same question")
    limit: int = Field(100, ge=1, le=500, description="Items per page")


class ListIncidents(Paged):
    projects: list[str] = Projects
    status: Literal["open", "acknowledged", "mitigated", "resolved", "closed"] | None = None
    since: AwareDatetime | None = Field(None, description="Opened at or after (RFC 3339)")


class Timeline(Paged):
    project: str = Name
    job_id: str = Name
    attempt: int | None = Field(None, ge=0, le=1_000_000)
    since: AwareDatetime | None = Field(None, description="Rows at or after (RFC 3339)")
    until: AwareDatetime | None = Field(None, description="Rows at or before (RFC 3339)")
    source: Literal["scheduler", "network", "storage", "node", "job", "change", "operator",
                    "topology"] | None = Field(None, description="Only this source's rows")


class IncidentArgs(Paged):
    incident_id: str = Name
    projects: list[str] = Projects


class EntityHistory(Paged):
    entity: str = Field(min_length=1, max_length=200,
                        description="A node, GPU (node-041/gpu3), NIC, switch, switch port "
                                    "(leaf-05/p9), filesystem or storage target")
    projects: list[str] = Projects
    since: AwareDatetime | None = None
    until: AwareDatetime | None = None


class Where(Args):
    at: AwareDatetime = Field(description="The moment asked about (RFC 3339)")
    node: str = Field("", max_length=200)
    switch: str = Field("", max_length=200)
    filesystem: str = Field("", max_length=200)
    projects: list[str] = Projects


class Similar(Args):
    incident_id: str = Name
    projects: list[str] = Projects
    limit: int = Field(10, ge=1, le=50)


class Actions(Args):
    incident_id: str = Name
    projects: list[str] = Projects


class Completeness(Args):
    project: str = Name
    job_id: str = Name
    attempt: int | None = Field(None, ge=0, le=1_000_000,
                                description="One attempt (default: every attempt)")


@dataclass(frozen=True)
class Tool:
    name: str
    args: type[Args]
    description: str

    def schema(self) -> dict[str, Any]:
        schema = self.args.model_json_schema()
        schema.pop("title", None)
        return schema


TOOLS = [
    Tool("list_incidents", ListIncidents,
         "Incidents that touched the credential's projects, newest first: class, entity, "
         "owner, severity, status, impact. Use an incident_id with `incident`."),
    Tool("job_timeline", Timeline,
         "A job's cross-system timeline (scheduler, network, storage, nodes, the job's own "
         "logs), oldest first, by attempt, time window and source; every row has its "
         "event_id. Paged."),
    Tool("incident", IncidentArgs,
         "One incident: its cause with confidence and explanation, the candidate causes "
         "weighed and why each lost, the diagnosis history (incident-log seqs), impact and "
         "recovery, whether the evidence is complete, and the evidence (paged) with event ids."),
    Tool("entity_history", EntityHistory,
         "What happened on an entity (GPU, node, NIC, switch, port, filesystem, target) across "
         "every job it served: its events (paged), the job attempts that ran on it, and the "
         "incidents on it."),
    Tool("where", Where,
         "Which job attempts were on a node, under a switch or using a filesystem at a "
         "moment. Give exactly one of node, switch, filesystem."),
    Tool("similar_incidents", Similar,
         "Past incidents like this one (same cause entity, same node, same class), with why "
         "each is similar."),
    Tool("proposed_actions", Actions,
         "The incident's follow-up actions (proposed and accepted) with the commands that "
         "accept or complete them and the runbook commands they name. Read-only: this server "
         "runs none of them."),
    Tool("completeness", Completeness,
         "What the timeline does not have, per attempt: which sources were expected (the "
         "scheduler, each rank's log, each node's kernel log, the fabric and storage the "
         "topology names, alerts) and which reported, when each last did, and the gaps."),
]
BY_NAME = {t.name: t for t in TOOLS}
