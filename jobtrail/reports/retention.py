"""History by policy: how long each class of rows is kept, enforced by ClickHouse TTLs.

Six classes, each a number of days (`JOBTRAIL_RETENTION_<CLASS>_DAYS`, 0 = kept forever):

| class | tables | measured from |
|---|---|---|
| raw_events | events, event_ids | the event's time |
| timelines | job_timeline, job_attempts | the event's time; the attempt's first known time |
| dead_letters | dead_letters | when it was received |
| deliveries | notifications, deliveries | when it was decided / attempted |
| incidents | incidents, incident_log, incident_evidence, incident_jobs, actions | `closed_at` |
| postmortems | the same tables, for incidents with a published postmortem | `closed_at` |

A TTL expression sees only its own row, so the incident family cannot use "closed N days
ago" directly: its TTL is `recorded_at + incidents days` (a row younger than the retention
never goes) with `DELETE WHERE incident_id NOT IN (the incidents still kept)`, a subquery on
`incident_retention FINAL` (status, closed_at and postmortem status of each incident,
written beside `incidents`: a TTL may not read its own table) evaluated at merge time.
Kept are incidents not closed, closed within the retention, with a postmortem in progress
(the hold: drafted, in review or approved but not published, however old), or with a
published postmortem within the postmortems retention. So an incident and its log,
evidence, jobs and actions go together, each table at its next merge. Resolved but never
closed incidents are kept.

Semantics of a replay: rows already past their TTL are dropped when ClickHouse writes or
merges their part (at insert on some versions, at the next merge on chDB 26), so replaying
events older than the raw or timeline retention does not bring them back. That is the
policy: the store holds no history past its retention, however it arrives; the incident log
follows its own rule, so a replay cannot rebuild an incident the policy removed.

The TTLs are set with `materialize_ttl_after_modify = 0` (no rewrite of
every part at start): parts written since follow the policy; parts written under another
TTL keep that TTL's dates until `jobtrail report retention --materialize` (a mutation that
recomputes them) — run it once after shortening a policy.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Protocol

CLASSES = ("raw_events", "timelines", "dead_letters", "incidents", "postmortems", "deliveries")

_PLAIN = {
    # table: (class, the row's time as a DateTime expression, guard or "")
    "events": ("raw_events", "toDateTime(time)", ""),
    "event_ids": ("raw_events", "toDateTime(time)", ""),
    "job_timeline": ("timelines", "toDateTime(time)", ""),
    "job_attempts": ("timelines",
                     "toDateTime(assumeNotNull(coalesce(submitted_at, started_at, ended_at)))",
                     "coalesce(submitted_at, started_at, ended_at) IS NOT NULL"),
    "dead_letters": ("dead_letters", "toDateTime(received_at)", ""),
    "notifications": ("deliveries", "toDateTime(decided_at)", ""),
    "deliveries": ("deliveries", "toDateTime(at)", ""),
}
INCIDENT_TABLES = ("incidents", "incident_log", "incident_evidence", "incident_jobs", "actions")
_ORIGINAL = {"notifications": 90, "deliveries": 90}
"""TTLs the migrations already set (0007): a policy of 0 days removes them."""
_HELD = "postmortem_status NOT IN ('', 'published', 'waived')"


@dataclass(frozen=True)
class RetentionPolicy:
    """Days each class is kept; 0 keeps it forever. The defaults keep everything but
    notifications and deliveries (90 days, as before); production sets its own."""

    raw_events: int = 0
    timelines: int = 0
    dead_letters: int = 0
    incidents: int = 0
    postmortems: int = 0
    deliveries: int = 90

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> RetentionPolicy:
        days: dict[str, int] = {}
        for name in CLASSES:
            key = f"JOBTRAIL_RETENTION_{name.upper()}_DAYS"
            raw = env.get(key)
            if raw is None or raw == "":
                continue
            try:
                days[name] = int(raw)
            except ValueError:
                raise ValueError(f"{key} must be a whole number of days, got {raw!r}") from None
            if days[name] < 0:
                raise ValueError(f"{key} must be 0 (keep) or more days, got {raw!r}")
        policy = cls(**days)
        if policy.postmortems and policy.incidents and policy.postmortems < policy.incidents:
            raise ValueError("JOBTRAIL_RETENTION_POSTMORTEMS_DAYS must not be shorter than "
                             "JOBTRAIL_RETENTION_INCIDENTS_DAYS (or 0: kept forever)")
        return policy

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def kept_incidents(policy: RetentionPolicy, database: str, cluster: str = "") -> str:
    """The subquery of incident ids the policy still keeps (see the module docstring): from
    `incident_retention`, on a cluster the shard's own (sharded by incident like the rest)."""
    closed = "closed_at > now64(3) - INTERVAL {d} DAY"
    published = ("postmortem_status = 'published'" if not policy.postmortems else
                 f"(postmortem_status = 'published' AND {closed.format(d=policy.postmortems)})")
    table = "incident_retention_local" if cluster else "incident_retention"
    return (f"SELECT incident_id FROM {database}.{table} FINAL WHERE status != 'closed' "
            f"OR closed_at IS NULL OR {closed.format(d=policy.incidents)} OR {_HELD} "
            f"OR {published}")


def ttl_clauses(policy: RetentionPolicy, database: str,
                cluster: str = "") -> dict[str, str | None]:
    """Each governed table's TTL clause (`None`: no TTL) under the policy."""
    out: dict[str, str | None] = {}
    for table, (klass, when, guard) in _PLAIN.items():
        days = getattr(policy, klass)
        out[table] = (f"{when} + INTERVAL {days} DAY" + (f" DELETE WHERE {guard}" if guard
                                                          else "")) if days else None
    for table in INCIDENT_TABLES:
        out[table] = (f"toDateTime(recorded_at) + INTERVAL {policy.incidents} DAY DELETE "
                      f"WHERE incident_id NOT IN ({kept_incidents(policy, database, cluster)})"
                      if policy.incidents else None)
    return out


def retention_statements(policy: RetentionPolicy, *, database: str, cluster: str = "",
                         has_ttl: Mapping[str, bool] | None = None) -> list[str]:
    """The ALTERs that put the policy on the tables: on a cluster, on the `_local` tables
    (a Distributed table holds no rows, hence no TTL). A table without a TTL under the policy
    gets `REMOVE TTL` only if it has one (`has_ttl`, default: what the migrations set)."""
    for name in (database, cluster):
        if name and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,63}", name):
            raise ValueError(f"{name!r} is not a plain identifier")
    current = has_ttl if has_ttl is not None else {t: t in _ORIGINAL for t in _ttl_tables()}
    out = []
    for table, clause in ttl_clauses(policy, database, cluster).items():
        target = f"{database}.{table}_local ON CLUSTER {cluster}" if cluster else \
            f"{database}.{table}"
        if clause is not None:
            out.append(f"ALTER TABLE {target} MODIFY TTL {clause}")
        elif current.get(table):
            out.append(f"ALTER TABLE {target} REMOVE TTL")
    return out


def _ttl_tables() -> tuple[str, ...]:
    return (*_PLAIN, *INCIDENT_TABLES)


class _Store(Protocol):
    client: Any
    database: str
    cluster: str


def apply(store: _Store, policy: RetentionPolicy, *, materialize: bool = False) -> list[str]:
    """Put the policy on the store's tables (at every start; cheap: no part is rewritten
    unless `materialize`). Returns the statements run."""
    suffix = "_local" if store.cluster else ""
    rows = store.client.query(
        "SELECT name, create_table_query FROM system.tables WHERE database = {db:String}",
        parameters={"db": store.database}).result_rows
    has_ttl = {name[: len(name) - len(suffix)] if suffix else name: " TTL " in query
               for name, query in rows if not suffix or name.endswith(suffix)}
    statements = retention_statements(policy, database=store.database, cluster=store.cluster,
                                      has_ttl=has_ttl)
    for statement in statements:
        store.client.command(statement, settings={"materialize_ttl_after_modify": 0})
    if materialize:
        on = f" ON CLUSTER {store.cluster}" if store.cluster else ""
        for table in _ttl_tables():
            store.client.command(f"ALTER TABLE {store.database}.{table}{suffix}{on} "
                                 "MATERIALIZE TTL", settings={"mutations_sync": 2})
    return statements
