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

What the engine can hold: a row's expiry is computed in 64-bit seconds and held at the last
second a `DateTime` represents, 2106-02-07 06:28:15 UTC (`toDateTime(t) + INTERVAL n DAY`
wraps past it to 1970: 29,000 days from 2026 expired every row at the next merge). So a
retention reaching past 2106 keeps the row until then; a retention is at most 36,500 days
(100 years, `JOBTRAIL_RETENTION_*_DAYS` refuses more: use 0, kept forever).

A change of policy never deletes more than the new policy says. ClickHouse keeps, in every
part, the TTL dates computed when the part was written, and a merge drops a part whose
stored dates have all passed without evaluating the new TTL: lengthening 30 days to 365
would still drop a 40-day-old part. So when a table's TTL changes (compared with what the
engine holds), `apply` stops that table's TTL merges, sets the new TTL and recomputes every
part's stored dates under it (`materialize_ttl_recalculate_only`: the dates only, nothing
deleted or rewritten), then lets TTL merges run again. A shortened policy then deletes at
the next TTL merge; `jobtrail report retention --materialize` recomputes every table's dates
again (after restoring a backup, say). Removing a table's TTL (0 days) deletes nothing.
An unchanged policy costs one read of `system.tables` at start.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from jobtrail.variables import SettingError

CLASSES = ("raw_events", "timelines", "dead_letters", "incidents", "postmortems", "deliveries")
MAX_DAYS = 36500
_LAST_SECOND = 4294967295
"""2106-02-07 06:28:15 UTC: the last second a ClickHouse DateTime holds (UInt32)."""
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")

_PLAIN = {
    # table: (class, the row's time (a DateTime64 expression), guard or "")
    "events": ("raw_events", "time", ""),
    "event_ids": ("raw_events", "time", ""),
    "job_timeline": ("timelines", "time", ""),
    "job_attempts": ("timelines", "assumeNotNull(coalesce(submitted_at, started_at, ended_at))",
                     "coalesce(submitted_at, started_at, ended_at) IS NOT NULL"),
    "dead_letters": ("dead_letters", "received_at", ""),
    "notifications": ("deliveries", "decided_at", ""),
    "deliveries": ("deliveries", "at", ""),
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

    def __post_init__(self) -> None:
        for name, days in self.as_dict().items():
            if type(days) is not int or not 0 <= days <= MAX_DAYS:
                raise SettingError(_variable(name), f"a whole number of days from 0 (kept "
                                   f"forever) to {MAX_DAYS}, got {days!r}")
        if self.postmortems and self.incidents and self.postmortems < self.incidents:
            raise SettingError(_variable("postmortems"), "must not be shorter than "
                               "JOBTRAIL_RETENTION_INCIDENTS_DAYS (or 0: kept forever)")

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> RetentionPolicy:
        from jobtrail import variables

        return cls.from_values({name: variables.parse(variables.BY_NAME[name], env.get(name))
                                for name in map(_variable, CLASSES)})

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> RetentionPolicy:
        """From the parsed variables (`jobtrail.variables.read`)."""
        return cls(**{name: values[_variable(name)] for name in CLASSES})

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def _variable(klass: str) -> str:
    return f"JOBTRAIL_RETENTION_{klass.upper()}_DAYS"


def expiry(when: str, days: int) -> str:
    """When a row whose time is `when` (DateTime64) expires: in 64-bit seconds, held
    between 1970 and the last second a DateTime holds (never wrapped)."""
    return (f"toDateTime(least(greatest(intDiv(toUnixTimestamp64Milli({when}), 1000) + "
            f"{days * 86400}, 0), {_LAST_SECOND}), 'UTC')")


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
        out[table] = (expiry(when, days) + (f" DELETE WHERE {guard}" if guard else "")
                      if days else None)
    for table in INCIDENT_TABLES:
        out[table] = (f"{expiry('recorded_at', policy.incidents)} DELETE WHERE incident_id "
                      f"NOT IN ({kept_incidents(policy, database, cluster)})"
                      if policy.incidents else None)
    return out


def _check_names(database: str, cluster: str) -> None:
    for name in (database, cluster):
        if name and not _IDENT.fullmatch(name):
            raise ValueError(f"{name!r} is not a plain identifier")


def _target(database: str, table: str, cluster: str) -> str:
    return f"{database}.{table}_local ON CLUSTER {cluster}" if cluster else \
        f"{database}.{table}"


def retention_statements(policy: RetentionPolicy, *, database: str, cluster: str = "",
                         has_ttl: Mapping[str, bool] | None = None) -> list[str]:
    """The ALTERs that put the policy on the tables: on a cluster, on the `_local` tables
    (a Distributed table holds no rows, hence no TTL). A table without a TTL under the policy
    gets `REMOVE TTL` only if it has one (`has_ttl`, default: what the migrations set)."""
    _check_names(database, cluster)
    current = has_ttl if has_ttl is not None else {t: t in _ORIGINAL for t in _ttl_tables()}
    out = []
    for table, clause in ttl_clauses(policy, database, cluster).items():
        if clause is not None:
            out.append(f"ALTER TABLE {_target(database, table, cluster)} MODIFY TTL {clause}")
        elif current.get(table):
            out.append(f"ALTER TABLE {_target(database, table, cluster)} REMOVE TTL")
    return out


def _ttl_tables() -> tuple[str, ...]:
    return (*_PLAIN, *INCIDENT_TABLES)


class _Store(Protocol):
    client: Any
    database: str
    cluster: str


def _current(store: _Store) -> dict[str, str]:
    """Each governed table's TTL as the engine holds it ('' when none)."""
    suffix = "_local" if store.cluster else ""
    rows = store.client.query(
        "SELECT name, create_table_query FROM system.tables WHERE database = {db:String}",
        parameters={"db": store.database}).result_rows
    out = {}
    for name, query in rows:
        table = name[: len(name) - len(suffix)] if suffix and name.endswith(suffix) else name
        if table in _ttl_tables() and (not suffix or name.endswith(suffix)):
            _, has, rest = query.partition(" TTL ")
            out[table] = rest.rsplit(" SETTINGS ", 1)[0] if has else ""
    return out


def _same(store: _Store, pairs: list[tuple[str, str]]) -> list[bool]:
    """Whether each pair of TTL expressions is one expression, as the engine formats it."""
    if not pairs:
        return []
    texts = [f"ALTER TABLE t MODIFY TTL {x}" for pair in pairs for x in pair]
    formatted = [row[0] for row in store.client.query(
        "SELECT formatQuerySingleLine(q) FROM (SELECT arrayJoin({q:Array(String)}) AS q)",
        parameters={"q": texts}).result_rows]
    return [formatted[2 * i] == formatted[2 * i + 1] for i in range(len(pairs))]


def apply(store: _Store, policy: RetentionPolicy, *, materialize: bool = False) -> list[str]:
    """Put the policy on the store's tables (at every start): only tables whose TTL changes
    are altered, each with its parts' stored TTL dates recomputed under the new TTL before a
    TTL merge may act on them (module docstring). `materialize` recomputes them for every
    table with a TTL. Returns the TTL statements run."""
    _check_names(store.database, store.cluster)
    current = _current(store)
    wanted = ttl_clauses(policy, store.database, store.cluster)
    compared = [t for t, clause in wanted.items() if clause is not None and current.get(t)]
    same = dict(zip(compared, _same(store, [(current[t], wanted[t] or "")
                                             for t in compared]), strict=True))
    statements = []
    for table, clause in wanted.items():
        target = _target(store.database, table, store.cluster)
        if clause is None:
            if current.get(table):
                statements.append(f"ALTER TABLE {target} REMOVE TTL")
                store.client.command(statements[-1])
        elif not same.get(table):
            statements.append(f"ALTER TABLE {target} MODIFY TTL {clause}")
            _recomputed(store, table, statements[-1])
        elif materialize:
            _recomputed(store, table, f"ALTER TABLE {target} MATERIALIZE TTL")
    return statements


def _recomputed(store: _Store, table: str, statement: str) -> None:
    """Run a TTL change (or MATERIALIZE TTL) with the table's TTL merges stopped, so no merge
    drops a part by dates computed under the TTL being replaced; returns once every part's
    dates are recomputed (`materialize_ttl_recalculate_only`: nothing is deleted by it)."""
    on = f" ON CLUSTER {store.cluster}" if store.cluster else ""
    name = f"{store.database}.{table}{'_local' if store.cluster else ''}"
    store.client.command(f"SYSTEM STOP TTL MERGES{on} {name}")
    try:
        store.client.command(f"ALTER TABLE {name}{on} MODIFY SETTING "
                             "materialize_ttl_recalculate_only = 1")
        store.client.command(statement, settings={"materialize_ttl_after_modify": 1,
                                                  "mutations_sync": 2})
    finally:
        store.client.command(f"SYSTEM START TTL MERGES{on} {name}")
