"""ClickHouse access: migrations, idempotent writes and the product's read queries.

One class for both backends: `chdb:///path` (embedded engine) and `http(s)://host:8123`
(server), both through clickhouse-connect. Every read binds the project as a server-side
parameter (`{project:String}`); no user input is ever formatted into SQL.

Write order matters for "nothing lost": derived rows (timeline, attempts) go first and the
canonical events last, because the sink treats "id already in `events`" as "fully processed".
A crash between the two leaves derived rows that the replay writes again; ReplacingMergeTree
collapses them and reads use FINAL (or, for the entity timeline over `events`, `LIMIT 1
BY id` on the matching rows, which is exact there and much cheaper).

By concern: row shapes and codecs in `store/rows.py`, the retry policy in `store/retry.py`,
the job reads bound to the caller's projects in `store/job_reads.py` and the incident log and
its projections in `store/incidents.py` (both base classes of `Store`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from importlib import resources
from typing import Any

import clickhouse_connect

from jobtrail.store.columnar import EVENT_IDS_SCHEMA, event_ids_block, timeline_block
from jobtrail.store.incidents import IncidentTables
from jobtrail.store.job_reads import JobTables
from jobtrail.store.retry import RetryPolicy
from jobtrail.store.rows import (
    ATTEMPT_COLUMNS,
    DEAD_LETTER_COLUMNS,
    EVENT_COLUMNS,
    TIMELINE_COLUMNS,
    _utc,
    attempt_from_row,
    attempt_row,
    dead_letter_row,
    event_from_row,
    string_set,
)
from jobtrail.variables import IDENTIFIER
from processors.attempts import Attempt
from processors.pipeline import Outputs
from schemas.dead_letters import DeadLetter
from schemas.events import Event

EVENT_IDS_COLUMNS = EVENT_IDS_SCHEMA.names



def _check_identifiers(database: str, cluster: str) -> None:
    """The database and cluster names are written into SQL text (identifiers cannot be bound
    as parameters): only ClickHouse's plain identifiers (`jobtrail.variables.IDENTIFIER`,
    also checked when the settings are read)."""
    if not isinstance(database, str) or not IDENTIFIER.fullmatch(database):
        raise ValueError(f"database name {database!r} is not a plain identifier (letters, "
                         "digits and _, not starting with a digit, at most 64)")
    if cluster and not IDENTIFIER.fullmatch(cluster):
        raise ValueError(f"cluster name {cluster!r} is not a plain identifier (letters, "
                         "digits and _, not starting with a digit, at most 64)")

_JSON_INSERT = {
    "input_format_json_read_objects_as_strings": 1,
    "date_time_input_format": "best_effort",
    "input_format_null_as_default": 1,
    "input_format_skip_unknown_fields": 1,
}


def migrations() -> list[tuple[int, str, str]]:
    """(version, name, sql) of every DDL file in schemas/clickhouse, in order."""
    out = []
    for entry in resources.files("schemas").joinpath("clickhouse").iterdir():
        match = re.match(r"^(\d{4})_(\w+)\.sql$", entry.name)
        if match:
            out.append((int(match.group(1)), match.group(2), entry.read_text()))
    return sorted(out)


def _statements(sql: str) -> list[str]:
    body = "\n".join(line for line in sql.splitlines() if not line.strip().startswith("--"))
    return [s.strip() for s in body.split(";") if s.strip()]


class Store(JobTables, IncidentTables):
    def __init__(self, client: Any, database: str, retry: RetryPolicy | None = None,
                 cluster: str = "") -> None:
        _check_identifiers(database, cluster)  # both reach SQL text unquoted
        self.client = client
        self.database = database
        self.retry = retry or RetryPolicy()
        self.cluster = cluster
        """A ClickHouse cluster name: the tables are Replicated + Distributed
        (`jobtrail.store.cluster_ddl`); empty for chDB and a single server."""

    @classmethod
    def connect(cls, dsn: str, database: str = "jobtrail",
                retry: RetryPolicy | None = None, *, timeout_s: float = 60.0,
                cluster: str = "") -> Store:
        """`timeout_s` bounds one request to a server (not the embedded engine); `cluster`
        names the server's cluster for Replicated + Distributed tables."""
        _check_identifiers(database, cluster)
        on_cluster = f" ON CLUSTER {cluster}" if cluster else ""
        # inserts into Distributed tables return once the shards have the rows
        settings = {"distributed_foreground_insert": 1} if cluster else None
        if dsn.startswith("chdb:"):
            client = clickhouse_connect.get_client(dsn=dsn)
            # identifiers cannot be bound as parameters; the name is validated above
            client.command(f"CREATE DATABASE IF NOT EXISTS {database}")
            client.database = database
        else:
            bootstrap = clickhouse_connect.get_client(dsn=dsn, send_receive_timeout=timeout_s)
            bootstrap.command(f"CREATE DATABASE IF NOT EXISTS {database}{on_cluster}")
            bootstrap.close()
            client = clickhouse_connect.get_client(dsn=dsn, database=database,
                                                   send_receive_timeout=timeout_s,
                                                   settings=settings)
        return cls(client, database, retry, cluster)

    # --- schema ---------------------------------------------------------------------------

    def migrate(self) -> list[int]:
        """Apply DDL files not yet recorded; safe to run at every start (on a cluster too:
        every statement there is idempotent and ON CLUSTER)."""
        from jobtrail.store.cluster_ddl import cluster_statements, migrations_table

        self.client.command(migrations_table(self.cluster, self.database) if self.cluster else
                            f"CREATE TABLE IF NOT EXISTS {self.database}.schema_migrations "
                            "(version UInt32, name String, applied_at DateTime64(3, 'UTC')) "
                            "ENGINE = ReplacingMergeTree ORDER BY version")
        done = {r[0] for r in self._q("SELECT version FROM schema_migrations FINAL").result_rows}
        applied = []
        for version, name, sql in migrations():
            if version in done:
                continue
            for statement in _statements(sql):
                for one in (cluster_statements(statement, cluster=self.cluster,
                                               database=self.database)
                            if self.cluster else [statement]):
                    self.client.command(one)
            self.client.insert(f"{self.database}.schema_migrations",
                               [[version, name, datetime.now(UTC)]],
                               column_names=["version", "name", "applied_at"])
            applied.append(version)
        return applied

    # --- writes ---------------------------------------------------------------------------

    def _insert(self, table: str, rows: list[list[Any]], columns: list[str],
                token: str | None) -> None:
        if not rows:
            return
        settings = {"insert_deduplication_token": f"{token}/{table}"} if token else None
        self.retry.run(lambda: self.client.insert(
            f"{self.database}.{table}", rows, column_names=columns, settings=settings))

    def arrivals(self, ids: Sequence[str]) -> dict[str, tuple[str, str]]:
        """id -> (arrival that first stored it, content digest) for the ids already stored.

        A primary-key lookup in `event_ids`, whatever the events' time or cluster: a re-send
        with another time is found too (it would sort elsewhere in `events`)."""
        if not ids:
            return {}
        # not bound by the client: its binding escapes character by character in Python, a
        # few µs an id, and the engine then parses an array literal (`string_set`)
        sql = ("SELECT id, any(arrival), any(digest) FROM event_ids "
               f"WHERE id IN {string_set(ids)} GROUP BY id")
        result = self.retry.run(lambda: self.client.query(sql))
        return {r[0]: (r[1], r[2]) for r in result.result_rows}

    def events_by_id(self, ids: Sequence[str]) -> dict[str, Event]:
        """Stored events by id (the slow path: to say how a conflicting re-send differs)."""
        if not ids:
            return {}
        rows = self._dicts(
            f"SELECT {', '.join(EVENT_COLUMNS)} FROM events FINAL "
            "WHERE id IN {ids:Array(String)}", ids=list(ids))
        return {r["id"]: event_from_row(r) for r in rows}

    def _insert_json(self, table: str, lines: list[bytes], token: str | None,
                     columns: list[str] | None = None) -> None:
        """JSONEachRow insert (JSONCompactEachRow with `columns`): ClickHouse parses in C++,
        several times faster than building native blocks in Python. Objects land in String
        columns as JSON text."""
        if lines:
            self._insert_raw(table, b"\n".join(lines), token,
                             "JSONCompactEachRow" if columns else "JSONEachRow", columns)

    def _insert_raw(self, table: str, block: bytes, token: str | None, fmt: str,
                    columns: list[str] | None = None) -> None:
        settings: dict[str, Any] = dict(_JSON_INSERT)
        if token:
            settings["insert_deduplication_token"] = f"{token}/{table}"
        self.retry.run(lambda: self.client.raw_insert(
            f"{self.database}.{table}", column_names=columns, insert_block=block, fmt=fmt,
            settings=settings))

    def stored_dead_letter_ids(self, ids: Sequence[str]) -> set[str]:
        if not ids:
            return set()
        result = self.retry.run(lambda: self._q(
            "SELECT id FROM dead_letters WHERE id IN {ids:Array(String)}", ids=list(ids)))
        return {r[0] for r in result.result_rows}

    def write(self, outputs: Outputs, dead_letters: Sequence[DeadLetter] = (),
              token: str | None = None, *, known: frozenset[str] | set[str] = frozenset(),
              arrivals: dict[str, str] | None = None,
              raw: dict[str, bytes] | None = None) -> None:
        """Write a processed batch; `token` makes a retried identical batch a no-op.

        `known` events are already stored by this same arrival (a replay after a crash): their
        derived rows are written again (idempotent), the events themselves are not. The
        `event_ids` rows go last: an id there means its whole batch is stored."""
        self._insert("dead_letters", [dead_letter_row(d) for d in dead_letters],
                     DEAD_LETTER_COLUMNS, token)
        if outputs.timeline:
            self._insert_raw("job_timeline", timeline_block(outputs.timeline), token,
                             "ArrowStream", TIMELINE_COLUMNS)
        self._insert("job_attempts", [attempt_row(a) for a in outputs.attempts],
                     ATTEMPT_COLUMNS, token)
        self.write_incidents(outputs.incidents, outputs.incident_states, token)
        new = [e for e in outputs.events if e.id not in known]
        given = raw or {}
        self._insert_json("events", [given.get(e.id) or e.to_json().encode() for e in new],
                          token)
        if new:
            self._insert_raw("event_ids", event_ids_block(new, arrivals or {}), token,
                             "ArrowStream", EVENT_IDS_COLUMNS)

    def recent_events(self, seconds: float) -> list[Event]:
        """Every event within `seconds` of the newest, oldest first (detector memory)."""
        rows = self._dicts(
            f"SELECT {', '.join(EVENT_COLUMNS)} FROM events FINAL WHERE "
            "time >= (SELECT max(time) FROM events) - toIntervalMillisecond({ms:Int64}) "
            "ORDER BY time, id", ms=int(seconds * 1000))
        return [event_from_row(r) for r in rows]

    def write_dead_letters(self, dead_letters: Sequence[DeadLetter],
                           token: str | None = None) -> int:
        """Store dead letters not stored yet (redelivery-safe); returns how many were new."""
        known = self.stored_dead_letter_ids([d.id for d in dead_letters])
        fresh = {d.id: d for d in dead_letters if d.id not in known}
        self._insert("dead_letters", [dead_letter_row(d) for d in fresh.values()],
                     DEAD_LETTER_COLUMNS, token)
        return len(fresh)

    def save_state(self, app_id: str, shard: str, positions: dict[str, int], body: bytes,
                   owner: str) -> None:
        """A worker's processor state for one shard (newest `version` wins on read)."""
        version = sum(max(0, offset + 1) for offset in positions.values())
        self.retry.run(lambda: self.client.insert(
            f"{self.database}.worker_state",
            [[app_id, shard, version, datetime.now(UTC), owner, dict(positions), body]],
            column_names=["app_id", "shard", "version", "saved_at", "owner", "positions",
                          "body"]))

    def load_state(self, app_id: str, shard: str) -> tuple[dict[str, int], bytes] | None:
        """The newest saved state of one shard: (positions, body), or None."""
        result = self.retry.run(lambda: self.client.query(
            "SELECT positions, body FROM worker_state WHERE app_id = {app:String} "
            "AND shard = {shard:String} ORDER BY version DESC, saved_at DESC LIMIT 1",
            parameters={"app": app_id, "shard": shard}, column_formats={"body": "bytes"}))
        if not result.result_rows:
            return None
        positions, body = result.result_rows[0]
        return {str(k): int(v) for k, v in dict(positions).items()}, bytes(body)

    def worker_states(self) -> list[dict[str, Any]]:
        """Where each worker shard's saved state stands: app, shard, positions, owner, when."""
        return self._dicts(
            "SELECT app_id, shard, argMax(positions, version) AS positions, "
            "argMax(owner, version) AS owner, max(saved_at) AS saved_at FROM worker_state "
            "GROUP BY app_id, shard ORDER BY app_id, shard")

    # --- reads ----------------------------------------------------------------------------

    def _q(self, sql: str, **parameters: Any) -> Any:
        return self.client.query(sql, parameters=parameters)

    def _dicts(self, sql: str, **parameters: Any) -> list[dict[str, Any]]:
        result = self._q(sql, **parameters)
        names = result.column_names
        return [
            {k: _utc(v) if isinstance(v, datetime) else v for k, v in zip(names, row, strict=True)}
            for row in result.result_rows
        ]

    def load_attempts(self) -> list[Attempt]:
        """Every attempt's current row, to rebuild processor state on start."""
        rows = self._dicts(f"SELECT {', '.join(ATTEMPT_COLUMNS)} FROM job_attempts FINAL")
        return [attempt_from_row(r) for r in rows]

    def recent_infra_events(self, lateness_s: float) -> list[Event]:
        """Unscoped events within the lateness window of the newest one, and every
        topology change: what the pipeline needs to rebuild its waiting room on start."""
        rows = self._dicts(
            f"SELECT {', '.join(EVENT_COLUMNS)} FROM events FINAL WHERE job_id = '' AND "
            "(type = 'topology.link' OR time >= (SELECT max(time) FROM events) "
            "- toIntervalMillisecond({lateness_ms:Int64})) ORDER BY time, id",
            lateness_ms=int(lateness_s * 1000))
        return [event_from_row(r) for r in rows]

    def dead_letters(self, limit: int = 1000) -> list[dict[str, Any]]:
        return self._dicts(
            "SELECT received_at, stage, reason, field, producer, event_ref, payload "
            "FROM dead_letters FINAL ORDER BY received_at, id LIMIT {limit:UInt32}", limit=limit)

    def count(self, table: str, *, final: bool = True) -> int:
        """Row count of one of our tables (operational checks and tests)."""
        if table not in {"events", "event_ids", "job_timeline", "job_attempts", "dead_letters",
                         "incident_log", "incidents", "incident_evidence", "incident_jobs",
                         "actions"}:
            raise ValueError(f"unknown table {table!r}")
        suffix = " FINAL" if final else ""
        return int(self._q(f"SELECT count() FROM {table}{suffix}").result_rows[0][0])

    def duplicate_ids(self) -> int:
        """Event ids stored more than once in the raw table (should always be 0)."""
        sql = "SELECT count() FROM (SELECT id FROM events GROUP BY id HAVING count() > 1)"
        return int(self._q(sql).result_rows[0][0])

    def ping(self) -> None:
        """A round trip to the engine; raises when it does not answer."""
        self._q("SELECT 1")

    def close(self) -> None:
        close: Callable[[], None] | None = getattr(self.client, "close", None)
        if close is not None and not self.client.__class__.__name__.startswith("Chdb"):
            close()
